//! Time for one full planner answer (breakdown, largest micro-batch, accumulation, strategy
//! table, advice): the panel recomputes it on every input change. Goal ≤ 1 ms.
//! Run: `cargo bench --bench planner`; numbers in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gputune_core::plan::model::preset;
use gputune_core::plan::recommend::{card, recommend};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{Checkpointing, Method, TrainingSetup};

fn planner(criterion: &mut Criterion) {
    let (Some(model), Some(rtx4090)) = (preset("llama-3.1-8b"), card("RTX 4090")) else {
        eprintln!("preset or card missing");
        return;
    };
    let qlora = TrainingSetup {
        method: Method::Qlora {
            rank: 16,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(1, 2048)
    };
    criterion.bench_function(
        "recommend llama-3.1-8b QLoRA on RTX 4090 (with strategy table)",
        |bench| bench.iter(|| black_box(recommend(&model, &qlora, &rtx4090, 32))),
    );
    if let Some(resnet) = preset("resnet50") {
        let setup = TrainingSetup::new(64, 224);
        criterion.bench_function(
            "recommend resnet50 on RTX 4090 (with strategy table)",
            |bench| bench.iter(|| black_box(recommend(&resnet, &setup, &rtx4090, 256))),
        );
    }
}

criterion_group!(benches, planner);
criterion_main!(benches);
