//! The moments of a training step the peak can fall at (the end of the forward pass, the
//! backward pass's start, the head's gradient, a recomputed block, a CNN's stages, the
//! optimizer step) and what each holds beside the stored state.

use super::state::{StoredState, output_head_parameters};
use crate::plan::activations::ActivationProfile;
use crate::plan::model::{Architecture, CnnConfig, Model};
use gputune_formats::reports::plan::Phase;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{Method, TrainingSetup};

/// One moment of a training step the peak can fall at and what it holds, in bytes (fractional
/// while estimating; rounded once in the breakdown).
#[derive(Debug, Clone, Copy)]
pub(super) struct Moment {
    pub phase: Phase,
    /// Stored weights, the optimizer's states and autocast's 16-bit copies live at the moment.
    pub persistent_bytes: f64,
    pub gradients_bytes: f64,
    pub activations_bytes: f64,
    pub temporaries_bytes: f64,
}

impl Moment {
    pub(super) fn total_bytes(&self) -> f64 {
        self.persistent_bytes
            + self.gradients_bytes
            + self.activations_bytes
            + self.temporaries_bytes
    }
}

/// QLoRA's bitsandbytes dequantizes a 4-bit weight to 16 bits for each matmul, forward and
/// backward: one block's largest matrix at a time, beside the backward pass's temporaries.
pub(super) fn add_dequantized_weight(
    model: &Model,
    setup: &TrainingSetup,
    activations: &mut ActivationProfile,
) {
    if matches!(setup.method, Method::Qlora { .. }) {
        let largest = model
            .lora_target_shapes(LoraTargets::AllLinear)
            .iter()
            .map(|(inputs, outputs)| (inputs * outputs) as f64)
            .fold(0.0, f64::max);
        activations.backward_start += 2.0 * largest;
        activations.recomputed_block += 2.0 * largest;
    }
}

/// Every moment of the step, with what it holds.
pub(super) fn step_moments(
    model: &Model,
    setup: &TrainingSetup,
    trainable_parameters: f64,
    stored: &StoredState,
    activations: &ActivationProfile,
) -> Vec<Moment> {
    let weights = stored.weights_bytes;
    let optimizer = stored.optimizer_bytes;
    let autocast_copies = stored.autocast_copies_bytes;
    // Accumulating gradients are held through every later micro-batch's forward and backward.
    let held_gradients = if setup.gradient_accumulation_steps > 1 {
        stored.gradients_bytes
    } else {
        0.0
    };
    // The head's backward pass makes its weight gradient after the loss's tensors are freed;
    // under autocast the 16-bit gradient of the weight's copy comes first, then its fp32 cast.
    let head_gradient_cast = if autocast_copies > 0.0 {
        2.0 * output_head_parameters(model)
    } else {
        0.0
    };
    let persistent_bytes = weights + autocast_copies + optimizer;
    let backward_gradients_bytes = held_gradients.max(stored.head_gradient_bytes);
    let after_loss_activations_bytes = activations.saved - activations.loss_saved;
    let mut moments = vec![
        Moment {
            phase: Phase::Forward,
            persistent_bytes,
            gradients_bytes: held_gradients,
            activations_bytes: activations.saved,
            temporaries_bytes: activations.loss_temporaries,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: held_gradients,
            activations_bytes: activations.saved,
            temporaries_bytes: activations.backward_start,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: backward_gradients_bytes,
            activations_bytes: after_loss_activations_bytes,
            temporaries_bytes: activations.logits_gradient + head_gradient_cast,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: backward_gradients_bytes,
            activations_bytes: after_loss_activations_bytes,
            temporaries_bytes: activations.recomputed_block,
        },
        Moment {
            phase: Phase::OptimizerStep,
            persistent_bytes: weights + optimizer,
            gradients_bytes: stored.gradients_bytes,
            activations_bytes: 0.0,
            temporaries_bytes: stored.step_temporaries_bytes,
        },
    ];
    if let Architecture::Cnn(config) = &model.architecture {
        moments.extend(cnn_backward_moments(
            config,
            setup,
            stored,
            held_gradients,
            trainable_parameters,
        ));
    }
    moments
}

/// The first moment holding the most (a later one must hold strictly more to win).
pub(super) fn largest_moment(moments: &[Moment]) -> Moment {
    let first = moments.first().copied().unwrap_or(Moment {
        phase: Phase::Forward,
        persistent_bytes: 0.0,
        gradients_bytes: 0.0,
        activations_bytes: 0.0,
        temporaries_bytes: 0.0,
    });
    moments.iter().copied().fold(first, |best, next| {
        if next.total_bytes() > best.total_bytes() {
            next
        } else {
            best
        }
    })
}

/// The most any moment of `phase` holds (0 when none falls in it).
pub(super) fn phase_peak(moments: &[Moment], phase: Phase) -> f64 {
    moments
        .iter()
        .filter(|moment| moment.phase == phase)
        .map(Moment::total_bytes)
        .fold(0.0, f64::max)
}

/// A CNN's backward pass frees each stage's activations as it passes and leaves its gradients
/// behind: while it works through stage s, the stem's and stages 0..=s's tensors (and
/// autocast's copies of their weights) and every later gradient coexist.
fn cnn_backward_moments(
    config: &CnnConfig,
    setup: &TrainingSetup,
    stored: &StoredState,
    held_gradients_bytes: f64,
    trainable_parameters: f64,
) -> Vec<Moment> {
    let types = crate::plan::value_types::Types::of(setup);
    let autocast = stored.autocast_copies_bytes > 0.0;
    crate::plan::cnn::backward_prefixes(
        config,
        setup.sequence_length as f64,
        setup.micro_batch as f64,
        types,
    )
    .into_iter()
    .map(|prefix| {
        let copies_bytes = if autocast {
            2.0 * prefix.parameters
        } else {
            0.0
        };
        let later_gradients_bytes =
            (trainable_parameters - prefix.parameters).max(0.0) * stored.gradient_bytes_per_value;
        Moment {
            phase: Phase::Backward,
            persistent_bytes: stored.weights_bytes + copies_bytes + stored.optimizer_bytes,
            gradients_bytes: held_gradients_bytes.max(later_gradients_bytes),
            activations_bytes: prefix.saved_bytes,
            temporaries_bytes: 0.0,
        }
    })
    .collect()
}
