//! What one GPU needs beyond the live tensors at the peak: the caching allocator's reserve and
//! the margin kept free where the measurements show the count falls short. Each share is fit
//! to real steps (tests/data/planner_cuda, tests/data/planner_measurements.toml,
//! docs/planner.md).

use crate::plan::model::{Architecture, Model};
use gputune_formats::reports::plan::SafetyMargin;
use gputune_formats::reports::plan_setup::{Allocator, Method, Offload, Overheads, TrainingSetup};

/// The default allocator's reserve beyond the live tensors at the peak, as a share of them:
/// blocks a step frees are cached and split for smaller requests, so the step's largest ones
/// take new segments. Fit to real steps on an H200 (tests/data/planner_cuda, docs/planner.md).
pub const DEFAULT_RESERVE_SHARE: f64 = 0.114;
/// With expandable segments: a small share of the live tensors ...
pub const EXPANDABLE_RESERVE_SHARE: f64 = 0.016;
/// ... and the hole the loss's largest tensor leaves when it is freed inside the segment and a
/// later, larger request cannot use it (fit to the same steps).
pub const EXPANDABLE_LOSS_HOLE_SHARE: f64 = 0.55;

const MIB: f64 = 1024.0 * 1024.0;

/// Sharded (FSDP, ZeRO-3) and offloaded runs: the reserve as a share of what a step allocates
/// and frees, and of that share on the weights and optimizer states (fit to the published
/// points, tests/data/planner_measurements.toml).
pub const SHARDED_RESERVE_SHARE: f64 = 0.25;
pub const SHARDED_PERSISTENT_SHARE: f64 = 0.65;

/// Kept free beyond a full fine-tune's total with the default allocator, as a share of the
/// loss's largest tensor, less the reserve already counted: what the default allocator held
/// beyond the live tensors was up to 1.40 times that tensor in the full fine-tunes measured on
/// a real GPU (GPT-2 medium, checkpointed; the loss's fp32 tensors are 16 % of its live
/// tensors), and a Qwen2 full fine-tune whose reserve the share undercounts was recommended
/// one micro-batch above the largest that ran (docs/planner.md).
pub const LOSS_HOLE_SHARE: f64 = 1.4;

/// Kept free beyond a CNN's total, as a share of its live tensors: on a real GPU, ResNet-50's
/// and ConvNeXt-tiny's were 1.6 % and 3.7 % above the count (cuDNN's workspaces are not
/// counted), and a ConvNeXt run at the largest micro-batch that fits has no other slack.
/// Transformers' counts were within 0.7 %: they need none.
pub const CNN_SAFETY_MARGIN: f64 = 0.04;

/// What a safety margin is for, in words (after "kept free for").
pub fn safety_margin_reason(margin: SafetyMargin) -> String {
    match margin {
        SafetyMargin::CnnWorkspaces => format!(
            "cuDNN's workspaces ({:.0} % of a CNN's live tensors)",
            CNN_SAFETY_MARGIN * 100.0
        ),
        SafetyMargin::LossHole => format!(
            "the hole the fp32 logits and loss leave in PyTorch's default allocator ({LOSS_HOLE_SHARE:.1} times the loss's largest tensor, less the reserve counted; expandable segments need none)"
        ),
    }
}

/// What the caching allocator holds beyond `tensors` (the live tensors at the step's peak):
/// its segments rounded (2 MiB blocks; expandable segments map 20 MiB pages) and what the
/// step's frees leave unusable. `loss_tensor` is the step's largest tensor that comes and goes.
pub fn allocator_reserve_bytes(overheads: &Overheads, tensors: f64, loss_tensor: f64) -> f64 {
    let tensors = tensors.max(0.0);
    let (extra, page) = match (overheads.allocator_reserve_fraction, overheads.allocator) {
        (Some(fraction), _) if fraction.is_finite() => (fraction.clamp(0.0, 10.0) * tensors, 2.0),
        (_, Allocator::Default) => (DEFAULT_RESERVE_SHARE * tensors, 2.0),
        (_, Allocator::ExpandableSegments) => (
            EXPANDABLE_RESERVE_SHARE * tensors + EXPANDABLE_LOSS_HOLE_SHARE * loss_tensor.max(0.0),
            20.0,
        ),
    };
    let reserved = ((tensors + extra) / (page * MIB)).ceil() * page * MIB;
    (reserved - tensors).max(0.0)
}

/// The allocator's reserve at the peak of a step whose live tensors are `tensors`, of which
/// `persistent` are stored weights and optimizer states.
pub(super) fn reserve_at_peak(
    setup: &TrainingSetup,
    sharded_parameters: bool,
    tensors: f64,
    persistent: f64,
    loss_tensor: f64,
) -> f64 {
    if sharded_parameters || setup.offload != Offload::None {
        // No sharded or offloaded run was measured on a GPU here: their reserve keeps the
        // share fit to the published FSDP and offload points (each block's gathered
        // parameters are freed and gathered again), unless the user gives one.
        match setup.overheads.allocator_reserve_fraction {
            Some(fraction) if fraction.is_finite() => fraction.clamp(0.0, 10.0) * tensors,
            _ => {
                SHARDED_RESERVE_SHARE
                    * ((tensors - persistent).max(0.0) + SHARDED_PERSISTENT_SHARE * persistent)
            }
        }
    } else {
        allocator_reserve_bytes(&setup.overheads, tensors, loss_tensor)
    }
}

/// Kept free beyond the total, and why. The allocator's reserve is margin enough where the
/// count holds (a capped run gives back its cache before it fails), except where the
/// measurements show otherwise.
pub(super) fn safety_margin(
    model: &Model,
    setup: &TrainingSetup,
    sharded_parameters: bool,
    tensors: f64,
    loss_tensor: f64,
    allocator_reserve: f64,
) -> (f64, Option<SafetyMargin>) {
    if matches!(model.architecture, Architecture::Cnn(_)) {
        // CNNs' live tensors were up to 3.7 % above the count.
        (
            CNN_SAFETY_MARGIN * tensors,
            Some(SafetyMargin::CnnWorkspaces),
        )
    } else if setup.method == Method::Full
        && setup.overheads.allocator == Allocator::Default
        && setup.overheads.allocator_reserve_fraction.is_none()
        && !sharded_parameters
        && setup.offload == Offload::None
    {
        // A full fine-tune's fp32 logits and loss come and go every step; with the default
        // allocator their freed blocks are split for smaller requests, and the next large one
        // takes a new segment. Where they dominate, the hole outgrows the counted reserve.
        let hole = LOSS_HOLE_SHARE * loss_tensor - allocator_reserve;
        if hole > 0.0 {
            (hole, Some(SafetyMargin::LossHole))
        } else {
            (0.0, None)
        }
    } else {
        (0.0, None)
    }
}
