//! `gputune plan --json`, pinned byte for byte (docs/json.md promises its fields to scripts):
//! the report for a LoRA fine-tune of Llama 2 7B on an RTX 4090 that needs checkpointing to fit,
//! as `plan --json --target-batch 32 --tokens 1e8` prints it (three of its strategy rows), and
//! every name the planner's closed sets print.

use serde::Serialize;
use serde_json::{Map, Value, json};

use gputune_formats::reports::plan::{
    Change, ChangeKind, MemoryBreakdown, PLAN_REPORT_FORMAT, Phase, PhasePeaks, PlanReport,
    PlannedSetup, SafetyMargin, Strategy,
};
use gputune_formats::reports::plan_setup::{
    Allocator, Attention, Checkpointing, LoraTargets, Method, Offload, Optimizer, Overheads,
    Precision, Sharding, Task, TrainingSetup,
};

use super::command_reports::printed;
use super::golden;
use super::vocabulary::words;

const LORA: Method = Method::Lora {
    rank: 16,
    targets: LoraTargets::Attention,
};

fn setup(micro_batch: u64, steps: u64, checkpointing: Checkpointing) -> TrainingSetup {
    TrainingSetup {
        method: LORA,
        micro_batch,
        gradient_accumulation_steps: steps,
        checkpointing,
        ..TrainingSetup::new(micro_batch, 2048)
    }
}

/// A breakdown at the backward pass's start; `forward` is the forward pass's own peak.
fn breakdown(
    activations: u64,
    temporaries: u64,
    allocator_reserve: u64,
    forward: u64,
) -> MemoryBreakdown {
    let cuda_context = 762 * 1024 * 1024;
    MemoryBreakdown {
        weights: 13_543_940_096,
        autocast_copies: 0,
        gradients: 67_108_864,
        optimizer: 134_217_728,
        activations,
        temporaries,
        overhead: cuda_context + allocator_reserve,
        allocator_reserve,
        cuda_context,
        safety_margin: 0,
        safety_margin_for: None,
        peak_phase: Phase::Backward,
        phases: PhasePeaks {
            forward,
            backward: 13_745_266_688 + activations + temporaries,
            optimizer_step: 13_812_375_552,
        },
    }
}

fn planned(setup: TrainingSetup, breakdown: MemoryBreakdown, fits: bool) -> PlannedSetup {
    PlannedSetup {
        setup,
        global_batch: 32,
        per_gpu_bytes: breakdown.total(),
        breakdown_bytes: breakdown,
        fits,
    }
}

fn strategy(method: Method, precision: Precision, bytes: u64, max: Option<u64>) -> Strategy {
    Strategy {
        method,
        precision,
        checkpointing: max != Some(1),
        per_gpu_bytes_at_batch_1: bytes,
        max_micro_batch: max,
    }
}

#[test]
fn plan_json_writes_its_bytes() {
    let yours = planned(
        setup(1, 32, Checkpointing::None),
        breakdown(11_041_505_280, 524_288_000, 2_887_245_824, 25_179_987_968),
        false,
    );
    let recommended = planned(
        setup(4, 8, Checkpointing::Full),
        breakdown(3_330_277_376, 2_097_152_000, 2_186_797_056, 18_648_408_064),
        true,
    );
    let qlora = Method::Qlora {
        rank: 16,
        targets: LoraTargets::Attention,
        double_quantization: true,
    };
    let changes = [Change {
        kind: ChangeKind::Checkpointing,
        advice: "turn on gradient checkpointing".to_string(),
        per_gpu_bytes: 17_624_465_408,
    }];
    let strategies = [
        strategy(LORA, Precision::Bf16Mixed, 17_548_967_936, Some(6)),
        strategy(LORA, Precision::Bf16, 17_548_967_936, Some(6)),
        strategy(qlora, Precision::Bf16Mixed, 18_314_428_416, Some(1)),
    ];
    let advice = [
        "RTX 4090 (Ada) supports bf16: prefer bf16 mixed precision, which needs no loss scaling."
            .to_string(),
    ];
    let summary = "Does not fit on RTX 4090 as set (27.01 GiB per GPU even at micro-batch 1, 23.99 GiB usable): turn on gradient checkpointing (16.41 GiB). Then micro-batch 4 × 8 accumulation step(s) = global batch 32, bf16-mixed, 20.64 GiB per GPU.";
    let report = PlanReport {
        format_version: PLAN_REPORT_FORMAT,
        model: "llama-2-7b",
        parameters: 6_738_415_616,
        trainable_parameters: 16_777_216,
        card: "RTX 4090",
        gpu_memory_bytes: 24_564 * 1024 * 1024,
        per_gpu_bytes: yours.per_gpu_bytes,
        breakdown_bytes: yours.breakdown_bytes,
        fits: false,
        max_micro_batch: None,
        grad_accum_steps: 8,
        target_global_batch: Some(32),
        fits_as_set_up: false,
        yours: &yours,
        recommended: Some(&recommended),
        changes: &changes,
        batch_notes: &[],
        model_load: json!({
            "attn_implementation": "sdpa",
            "dtype": "bfloat16",
            "lora_config": {
                "lora_alpha": 32,
                "r": 16,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]
            },
            "model": "llama-2-7b"
        }),
        strategies: &strategies,
        advice: &advice,
        summary,
        training_seconds: Some(40_941.776_271_186_44),
    };
    golden("reports/plan.json", &printed(&report));
}

/// Each value as JSON (report values are only written).
fn written<T: Serialize + std::fmt::Debug>(values: &[T]) -> Value {
    Value::Array(
        values
            .iter()
            .map(|value| match serde_json::to_value(value) {
                Ok(json) => json,
                Err(error) => panic!("{value:?} does not serialize: {error}"),
            })
            .collect(),
    )
}

#[test]
fn plan_json_closed_sets_keep_their_names() {
    let mut all = Map::new();
    let qlora = Method::Qlora {
        rank: 8,
        targets: LoraTargets::AllLinear,
        double_quantization: false,
    };
    all.insert("method".into(), words(&[Method::Full, LORA, qlora]));
    all.insert("lora_targets".into(), words(&LoraTargets::ALL));
    all.insert("precision".into(), words(&Precision::ALL));
    all.insert("optimizer".into(), words(&Optimizer::ALL));
    all.insert("checkpointing".into(), words(&Checkpointing::ALL));
    all.insert("attention".into(), words(&Attention::ALL));
    all.insert("sharding".into(), words(&Sharding::ALL));
    all.insert("offload".into(), words(&Offload::ALL));
    all.insert("task".into(), words(&Task::ALL));
    all.insert("allocator".into(), words(&Allocator::ALL));
    all.insert(
        "phase".into(),
        written(&[Phase::Forward, Phase::Backward, Phase::OptimizerStep]),
    );
    all.insert(
        "safety_margin_for".into(),
        written(&[SafetyMargin::CnnWorkspaces, SafetyMargin::LossHole]),
    );
    all.insert(
        "change_kind".into(),
        written(&[
            ChangeKind::Precision,
            ChangeKind::EightBitOptimizer,
            ChangeKind::ChunkedCrossEntropy,
            ChangeKind::Checkpointing,
            ChangeKind::ActivationOffload,
            ChangeKind::PureBf16,
            ChangeKind::Method,
        ]),
    );
    golden(
        "reports/plan-vocabulary.json",
        &printed(&Value::Object(all)),
    );
}

/// A setup reads back from what `plan --json` prints, and from the command line's names (the
/// planner's measurement tables are written with them).
#[test]
fn a_training_setup_reads_back_and_from_the_command_lines_names() {
    let setup = TrainingSetup {
        method: Method::Qlora {
            rank: 64,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        optimizer: Optimizer::PagedAdamw8bit,
        offload: Offload::OptimizerAndParams,
        sharding: Sharding::Zero3,
        gpus: 4,
        overheads: Overheads {
            allocator: Allocator::ExpandableSegments,
            allocator_reserve_fraction: Some(0.05),
            ..Overheads::default()
        },
        ..TrainingSetup::new(2, 4096)
    };
    let json = serde_json::to_string(&setup).unwrap_or_else(|error| panic!("{error}"));
    let back: Result<TrainingSetup, _> = serde_json::from_str(&json);
    assert_eq!(back.ok(), Some(setup), "{json}");
    let by_cli_names = json
        .replace("\"all_linear\"", "\"all-linear\"")
        .replace("\"paged_adamw_8bit\"", "\"paged-adamw-8bit\"")
        .replace("\"optimizer_and_params\"", "\"optimizer+params\"")
        .replace("\"bf16_mixed\"", "\"bf16-mixed\"")
        .replace("\"language_model\"", "\"lm\"")
        .replace("\"expandable_segments\"", "\"expandable-segments\"");
    assert_ne!(by_cli_names, json);
    let back: Result<TrainingSetup, _> = serde_json::from_str(&by_cli_names);
    assert_eq!(back.ok(), Some(setup), "{by_cli_names}");
}
