//! The planner against real training steps (tests/data/planner_calibration.toml, measured by
//! tools/calibrate/calibrate.py: every live tensor storage of one step counted, on a CPU made
//! to take CUDA's paths). Held to: the live tensors at the step's peak within a median of 5 %
//! and at most 12 %, the peak in the measured phase, weights, gradients and optimizer states
//! exact, and every component reported. Run with `-- --nocapture` for the tables that
//! docs/planner.md shows.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use gputune_core::plan::activations::activation_profile;
use gputune_core::plan::import::load_model;
use gputune_core::plan::memory::{estimate, parameter_counts};
use gputune_core::plan::model::{Model, preset};
use gputune_formats::reports::plan::{MemoryBreakdown, Phase};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Attention, Checkpointing, Method, Optimizer, Precision, Task, TrainingSetup,
};

#[derive(Debug, Deserialize)]
struct Table {
    measurement: Vec<Measurement>,
}

#[derive(Debug, Deserialize)]
struct Measurement {
    id: String,
    config: Option<String>,
    model: Option<String>,
    family: String,
    method: String,
    lora_rank: Option<u64>,
    lora_targets: Option<String>,
    precision: Precision,
    optimizer: String,
    micro_batch: u64,
    seq_len: Option<u64>,
    image_size: Option<u64>,
    checkpointing: Checkpointing,
    /// Absent for convolutional networks.
    #[serde(default)]
    attention: Attention,
    task: String,
    dropout: bool,
    parameters_total: u64,
    parameters_trainable: u64,
    weights_bytes: f64,
    buffers_bytes: f64,
    gradients_bytes: f64,
    optimizer_bytes: f64,
    peak_total_bytes: f64,
    peak_phase: String,
    at_peak_weights_bytes: f64,
    at_peak_gradients_bytes: f64,
    at_peak_optimizer_bytes: f64,
    at_peak_activations_bytes: f64,
    at_peak_weight_copies_bytes: f64,
    forward_end_activations_bytes: f64,
    forward_end_weight_copies_bytes: f64,
    phase_max_forward_bytes: f64,
    phase_max_backward_bytes: f64,
    phase_max_optimizer_bytes: f64,
}

const MIB: f64 = 1024.0 * 1024.0;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn table() -> Table {
    let path = root().join("tests/data/planner_calibration.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{error}"));
    toml::from_str(&text).unwrap_or_else(|error| panic!("parsing the table: {error}"))
}

/// The planner's model for a row: its config.json through the importer, or the preset.
/// Encoder-decoders (T5) are refused by the importer and are measured only for reference.
fn model_of(point: &Measurement) -> Option<Model> {
    match (&point.config, &point.model) {
        (Some(config), _) => match load_model(&root().join(Path::new(config))) {
            Ok(model) => Some(model),
            Err(error) => {
                assert_eq!(point.family, "t5", "{}: {error}", point.id);
                None
            }
        },
        (None, Some(name)) => {
            Some(preset(name).unwrap_or_else(|| panic!("{}: no preset", point.id)))
        }
        (None, None) => panic!("{}: neither config nor model", point.id),
    }
}

fn setup_of(point: &Measurement) -> TrainingSetup {
    let targets = match point.lora_targets.as_deref() {
        Some("all-linear") => LoraTargets::AllLinear,
        Some("attention") => LoraTargets::Attention,
        other => {
            assert_eq!(point.method, "full", "{}: LoRA targets {other:?}", point.id);
            LoraTargets::Attention
        }
    };
    let method = match point.method.as_str() {
        "lora" => Method::Lora {
            rank: point
                .lora_rank
                .unwrap_or_else(|| panic!("{}: lora_rank", point.id)),
            targets,
        },
        "full" => Method::Full,
        other => panic!("{}: method {other}", point.id),
    };
    // The harness runs torch.optim's foreach implementations, the default on a GPU.
    let optimizer = match point.optimizer.as_str() {
        "adamw" => Optimizer::Adamw,
        "sgd" => Optimizer::SgdMomentum,
        other => panic!("{}: optimizer {other}", point.id),
    };
    let size = point
        .seq_len
        .or(point.image_size)
        .unwrap_or_else(|| panic!("{}: seq_len or image_size", point.id));
    TrainingSetup {
        method,
        precision: point.precision,
        optimizer,
        checkpointing: point.checkpointing,
        attention: point.attention,
        task: match point.task.as_str() {
            "classification" => Task::Classification,
            _ => Task::LanguageModel,
        },
        ..TrainingSetup::new(point.micro_batch, size)
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Forward => "forward",
        Phase::Backward => "backward",
        Phase::OptimizerStep => "optimizer",
    }
}

fn percent(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured.max(1.0) * 100.0
}

fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / MIB)
}

struct Row {
    id: String,
    total_error: f64,
    activation_error: f64,
    phase_matches: bool,
}

/// Every gradient, as the planner counts it: under accumulation they are all held at the peak.
fn all_gradients_bytes(model: &Model, setup: &TrainingSetup) -> f64 {
    let accumulating = TrainingSetup {
        gradient_accumulation_steps: 2,
        ..*setup
    };
    estimate(model, &accumulating)
        .unwrap_or_else(|error| panic!("{error}"))
        .gradients as f64
}

/// One row of the tables: the planner's prediction beside the measurement.
fn compare(point: &Measurement, model: &Model) -> Row {
    let setup = setup_of(point);
    let counts = parameter_counts(model, &setup.method);
    // PEFT's adapters are parameters of the model it returns.
    let adapters = if setup.method == Method::Full {
        0
    } else {
        counts.trainable as u64
    };
    assert_eq!(
        model.parameter_count() + adapters,
        point.parameters_total,
        "{}: parameters",
        point.id
    );
    assert_eq!(
        counts.trainable as u64, point.parameters_trainable,
        "{}: trained parameters",
        point.id
    );
    if let gputune_core::plan::model::Architecture::Transformer(config) = &model.architecture {
        assert_eq!(config.dropout, point.dropout, "{}: dropout", point.id);
    }
    let breakdown: MemoryBreakdown =
        estimate(model, &setup).unwrap_or_else(|error| panic!("{}: {error}", point.id));
    // Weights, gradients and optimizer states are exact (rotary tables and position ids, the
    // buffers, are left out of the weights: at most a few KiB).
    let parameter_bytes = point.weights_bytes - point.buffers_bytes;
    for (name, predicted, measured) in [
        (
            "weights",
            (breakdown.weights - breakdown.autocast_copies) as f64,
            parameter_bytes,
        ),
        (
            "gradients",
            all_gradients_bytes(model, &setup),
            point.gradients_bytes,
        ),
        (
            "optimizer states",
            breakdown.optimizer as f64,
            point.optimizer_bytes,
        ),
    ] {
        assert!(
            percent(predicted, measured).abs() <= 0.5,
            "{}: {name} {} MiB, measured {} MiB",
            point.id,
            mib(predicted),
            mib(measured)
        );
    }
    let predicted = breakdown.tensors() as f64;
    let total_error = percent(predicted, point.peak_total_bytes);
    let saved = activation_profile(&model.architecture, &setup).saved;
    // The table's activations hold autocast's weight copies; the planner counts them as weights.
    let measured_saved =
        point.forward_end_activations_bytes - point.forward_end_weight_copies_bytes;
    let activation_error = percent(saved, measured_saved);
    println!(
        "| {} | {} / {} | {} → {} | {} → {} | {} → {} | {} → {} | {} → {} | {:+.1} % | {} → {} ({:+.1} %) |",
        point.id,
        point.peak_phase,
        phase_name(breakdown.peak_phase),
        mib(point.at_peak_weights_bytes + point.at_peak_weight_copies_bytes),
        mib(breakdown.weights as f64),
        mib(point.at_peak_gradients_bytes),
        mib(breakdown.gradients as f64),
        mib(point.at_peak_optimizer_bytes),
        mib(breakdown.optimizer as f64),
        mib(point.at_peak_activations_bytes - point.at_peak_weight_copies_bytes),
        mib((breakdown.activations + breakdown.temporaries) as f64),
        mib(point.peak_total_bytes),
        mib(predicted),
        total_error,
        mib(measured_saved),
        mib(saved),
        activation_error,
    );
    Row {
        id: point.id.clone(),
        total_error,
        activation_error,
        phase_matches: phase_name(breakdown.peak_phase) == point.peak_phase,
    }
}

#[test]
fn planner_matches_real_training_steps() {
    let table = table();
    println!(
        "| setup | peak phase (measured / planner) | weights (MiB, measured → planner) | gradients | optimizer states | activations and temporaries | total | error | forward-end activations |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let mut phases = Vec::new();
    for point in &table.measurement {
        let Some(model) = model_of(point) else {
            continue;
        };
        rows.push(compare(point, &model));
        let breakdown =
            estimate(&model, &setup_of(point)).unwrap_or_else(|error| panic!("{error}"));
        // Each phase's largest moment within 12 % too.
        for (phase, measured, predicted) in [
            (
                "forward",
                point.phase_max_forward_bytes,
                breakdown.phases.forward,
            ),
            (
                "backward",
                point.phase_max_backward_bytes,
                breakdown.phases.backward,
            ),
            (
                "optimizer step",
                point.phase_max_optimizer_bytes,
                breakdown.phases.optimizer_step,
            ),
        ] {
            let error = percent(predicted as f64, measured);
            assert!(
                error.abs() <= 12.0,
                "{}: {phase} maximum {error:+.1} %",
                point.id
            );
        }
        phases.push(format!(
            "| {} | {} → {} | {} → {} | {} → {} |",
            point.id,
            mib(point.phase_max_forward_bytes),
            mib(breakdown.phases.forward as f64),
            mib(point.phase_max_backward_bytes),
            mib(breakdown.phases.backward as f64),
            mib(point.phase_max_optimizer_bytes),
            mib(breakdown.phases.optimizer_step as f64),
        ));
    }
    println!("\n| setup | forward maximum (MiB, measured → planner) | backward | optimizer step |");
    println!("|---|---|---|---|");
    for line in &phases {
        println!("{line}");
    }
    let median = |mut errors: Vec<f64>| {
        errors.sort_by(f64::total_cmp);
        errors[errors.len() / 2]
    };
    let worst = |error: fn(&Row) -> f64| {
        rows.iter()
            .max_by(|a, b| error(a).abs().total_cmp(&error(b).abs()))
            .map(|row| (row.id.clone(), error(row)))
            .unwrap_or_default()
    };
    let total_median = median(rows.iter().map(|row| row.total_error.abs()).collect());
    let total_worst = worst(|row| row.total_error);
    let activation_median = median(rows.iter().map(|row| row.activation_error.abs()).collect());
    let activation_worst = worst(|row| row.activation_error);
    let phase_misses: Vec<&str> = rows
        .iter()
        .filter(|row| !row.phase_matches)
        .map(|row| row.id.as_str())
        .collect();
    println!(
        "\n{} setups. Total at the peak: median absolute error {total_median:.1} %, worst {:+.1} % ({}). Forward-end activations: median {activation_median:.1} %, worst {:+.1} % ({}). Peak phase missed: {phase_misses:?}",
        rows.len(),
        total_worst.1,
        total_worst.0,
        activation_worst.1,
        activation_worst.0,
    );
    assert!(rows.len() >= 13, "more than a dozen setups");
    assert!(
        phase_misses.is_empty(),
        "peak phase missed: {phase_misses:?}"
    );
    assert!(
        activation_worst.1.abs() <= 12.0,
        "forward-end activations {:+.1} % ({})",
        activation_worst.1,
        activation_worst.0
    );
    assert!(
        total_median <= 5.0,
        "median absolute error {total_median:.1} %"
    );
    assert!(
        total_worst.1.abs() <= 12.0,
        "worst {:+.1} % ({})",
        total_worst.1,
        total_worst.0
    );
}
