//! `gputune plan`'s report as text: the memory of the user's setup and the recommended one side
//! by side, the two rows to compare, the changes, notes, the strategy table and advice.

use std::io::Write;

use crate::plan::memory::safety_margin_reason;
use crate::plan::model::Model;
use crate::plan::recommend::{GpuCard, Recommendation, batch_product, planned_batch, usable_bytes};
use gputune_formats::reports::plan::MemoryBreakdown;
use gputune_formats::reports::plan::{ChangeKind, PlannedSetup};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::Method;

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

/// The whole report.
pub(super) fn write_report(
    out: &mut dyn Write,
    model: &Model,
    card: &GpuCard,
    recommendation: &Recommendation,
    trainable: f64,
    seconds: Option<f64>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} parameters ({} trained) on {} ({})",
        crate::text::printable(&model.name),
        gputune_formats::units::parameters(model.parameter_count()),
        gputune_formats::units::parameters(trainable.max(0.0) as u64),
        card.name,
        gib(card.memory_bytes)
    )?;
    writeln!(out, "{}", recommendation.summary)?;
    writeln!(out)?;
    write_breakdowns(
        out,
        &recommendation.yours,
        recommendation.recommended.as_ref(),
    )?;
    writeln!(out)?;
    write_rows(out, recommendation)?;
    if !recommendation.changes.is_empty() {
        writeln!(out, "Changes from your setup, cheapest in speed first:")?;
        for (index, change) in recommendation.changes.iter().enumerate() {
            writeln!(
                out,
                "  {}. {} ({} per GPU at micro-batch 1)",
                index + 1,
                change.advice,
                gib(change.per_gpu_bytes)
            )?;
        }
    }
    for note in &recommendation.batch_notes {
        writeln!(out, "Note: {note}")?;
    }
    if let Some(seconds) = seconds {
        writeln!(out, "Time estimate: {:.1} h", seconds / 3600.0)?;
    }
    writeln!(out, "\nStrategies on {} (best first):", card.name)?;
    writeln!(
        out,
        "  {:<6} {:<11} {:<14} {:>12} {:>10}",
        "method", "precision", "checkpointing", "at batch 1", "max batch"
    )?;
    for row in &recommendation.strategies {
        writeln!(
            out,
            "  {:<6} {:<11} {:<14} {:>12} {:>10}",
            row.method.name(),
            row.precision.name(),
            if row.checkpointing { "full" } else { "none" },
            gib(row.per_gpu_bytes_at_batch_1),
            row.max_micro_batch
                .map_or("no fit".to_string(), |batch| batch.to_string())
        )?;
    }
    for line in &recommendation.advice {
        writeln!(out, "Note: {line}")?;
    }
    Ok(())
}

fn parts(breakdown: &MemoryBreakdown) -> [(&'static str, u64); 7] {
    [
        ("Weights", breakdown.weights),
        ("Gradients", breakdown.gradients),
        ("Optimizer", breakdown.optimizer),
        ("Activations", breakdown.activations),
        ("Temporaries", breakdown.temporaries),
        ("Allocator", breakdown.allocator_reserve),
        ("CUDA context", breakdown.cuda_context),
    ]
}

/// Per-GPU memory at the peak, part by part: the user's setup, and the recommended one.
fn write_breakdowns(
    out: &mut dyn Write,
    yours: &PlannedSetup,
    recommended: Option<&PlannedSetup>,
) -> std::io::Result<()> {
    let header = recommended.map_or(String::new(), |_| format!(" {:>12}", "recommended"));
    writeln!(out, "  {:<12} {:>12}{header}", "Per GPU", "yours")?;
    let rows = parts(&yours.breakdown_bytes).into_iter().enumerate();
    for (index, (label, bytes)) in rows {
        let other = recommended.map_or(String::new(), |planned| {
            format!(" {:>12}", gib(parts(&planned.breakdown_bytes)[index].1))
        });
        writeln!(out, "  {label:<12} {:>12}{other}", gib(bytes))?;
    }
    let other = recommended.map_or(String::new(), |planned| {
        format!(" {:>12}", gib(planned.per_gpu_bytes))
    });
    writeln!(
        out,
        "  {:<12} {:>12}{other} at the peak ({}), as nvidia-smi would show it",
        "Total",
        gib(yours.per_gpu_bytes),
        yours.breakdown_bytes.peak_phase.name()
    )?;
    let overheads = &yours.setup.overheads;
    let reserve = match overheads.allocator_reserve_fraction {
        Some(fraction) => format!("{:.0} % of the live tensors, as given", fraction * 100.0),
        None => "measured on an H200 with PyTorch 2.11".to_string(),
    };
    writeln!(
        out,
        "  Assumed: a {} CUDA context (measured on an H200 with driver 580 and CUDA 13; it differs per card and driver: --cuda-context-mib), PyTorch's {} allocator ({reserve}).",
        gib(overheads.cuda_context_bytes),
        overheads.allocator.name(),
    )?;
    if let Some(margin) = yours.breakdown_bytes.safety_margin_for {
        writeln!(
            out,
            "  Kept free: {} for {}.",
            gib(yours.breakdown_bytes.safety_margin),
            safety_margin_reason(margin)
        )?;
    }
    Ok(())
}

/// The recommended setup and the user's, one row each.
fn write_rows(out: &mut dyn Write, recommendation: &Recommendation) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<12} {:<6} {:<22} {:<11} {:<36} {:>10} {:>5}",
        "",
        "method",
        "micro × steps = global",
        "precision",
        "optimizer and memory options",
        "per GPU",
        "fits"
    )?;
    let rows = recommendation
        .recommended
        .iter()
        .map(|planned| ("recommended", planned))
        .chain(std::iter::once(("yours", &recommendation.yours)));
    for (label, planned) in rows {
        writeln!(
            out,
            "  {label:<12} {:<6} {:<22} {:<11} {:<36} {:>10} {:>5}",
            planned.setup.method.name(),
            batch_product(planned_batch(planned), planned.setup.gpus),
            planned.setup.precision.name(),
            planned.options_summary(),
            gib(planned.per_gpu_bytes),
            if planned.fits { "yes" } else { "no" }
        )?;
    }
    Ok(())
}

/// Why nothing was exported, and what to do.
pub(super) fn refusal(recommendation: &Recommendation, card: &GpuCard) -> String {
    let yours = &recommendation.yours;
    let needs = format!(
        "your setup does not fit on {} ({} per GPU at micro-batch {}; {} usable)",
        card.name,
        gib(yours.per_gpu_bytes),
        yours.setup.micro_batch,
        gib(usable_bytes(card.memory_bytes) as u64)
    );
    match &recommendation.recommended {
        Some(planned) => format!(
            "{needs}. Run it again with {} to export the recommendation, or add --force to write your setup anyway.",
            change_flags(recommendation, planned).join(" ")
        ),
        None => format!(
            "{needs}, and no strategy fits. Plan for more GPUs (--gpus N --sharding fsdp) or CPU offload (--sharding zero3 --offload optimizer+params), or add --force to write your setup anyway."
        ),
    }
}

/// The `gputune plan` options that make the recommendation's changes.
pub(super) fn change_flags(recommendation: &Recommendation, planned: &PlannedSetup) -> Vec<String> {
    let setup = &planned.setup;
    let mut flags = Vec::new();
    for change in &recommendation.changes {
        match change.kind {
            ChangeKind::Precision | ChangeKind::PureBf16 => {
                flags.push(format!("--precision {}", setup.precision.name()));
            }
            ChangeKind::EightBitOptimizer => {
                flags.push(format!("--optimizer {}", setup.optimizer.name()));
            }
            ChangeKind::ChunkedCrossEntropy => flags.push("--chunked-cross-entropy".into()),
            ChangeKind::Checkpointing => flags.push("--checkpointing full".into()),
            ChangeKind::ActivationOffload => flags.push("--activation-offload".into()),
            ChangeKind::Method => {
                if let Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } =
                    setup.method
                {
                    let targets = match targets {
                        LoraTargets::AllLinear => "all-linear",
                        LoraTargets::Attention => "attention",
                    };
                    flags.push(format!(
                        "--method {} --lora-rank {rank} --lora-targets {targets}",
                        setup.method.name()
                    ));
                }
            }
        }
    }
    flags.dedup();
    flags
}
