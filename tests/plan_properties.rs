//! The planner never panics or overflows, whatever it is asked, and behaves monotonically
//! where memory must grow.

use gputune::plan::memory::estimate;
use gputune::plan::model::{LoraTargets, PRESET_NAMES, preset};
use gputune::plan::recommend::{card, gradient_accumulation_steps, max_micro_batch, recommend};
use gputune::plan::setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Overheads, Precision, Sharding,
    TrainingSetup,
};
use proptest::prelude::*;

fn precision(index: u8) -> Precision {
    [
        Precision::Fp32,
        Precision::Fp16Mixed,
        Precision::Bf16Mixed,
        Precision::Bf16,
    ][index as usize % 4]
}

fn optimizer(index: u8) -> Optimizer {
    [
        Optimizer::Adamw,
        Optimizer::Adamw8bit,
        Optimizer::PagedAdamw8bit,
        Optimizer::Adafactor,
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
    ][index as usize % 6]
}

fn sharding(index: u8) -> Sharding {
    [
        Sharding::None,
        Sharding::Ddp,
        Sharding::Fsdp,
        Sharding::Zero1,
        Sharding::Zero2,
        Sharding::Zero3,
    ][index as usize % 6]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Any combination, including absurd numbers, gives a breakdown or a clear error.
    #[test]
    fn any_input_gives_an_answer_or_an_error(
        model_index in 0usize..PRESET_NAMES.len(),
        method_index in 0u8..3,
        rank in 0u64..100_000,
        precision_index in 0u8..4,
        optimizer_index in 0u8..6,
        micro_batch in prop_oneof![Just(0u64), 1u64..64, Just(u64::MAX)],
        sequence_length in prop_oneof![Just(0u64), 1u64..65_536, Just(u64::MAX)],
        gpus in prop_oneof![Just(0u64), 1u64..16, Just(u64::MAX)],
        sharding_index in 0u8..6,
        checkpointing in any::<bool>(),
        eager in any::<bool>(),
        activation_offload in any::<bool>(),
        chunked_cross_entropy in any::<bool>(),
        context_mib in prop_oneof![Just(0u64), 1u64..10_000, Just(u64::MAX / (1 << 20))],
        reserve in prop_oneof![Just(f64::NAN), Just(-1.0), 0.0f64..2.0, Just(f64::INFINITY)],
    ) {
        let Some(model) = preset(PRESET_NAMES[model_index]) else { return Err(TestCaseError::fail("preset")) };
        let method = match method_index {
            0 => Method::Full,
            1 => Method::Lora { rank, targets: LoraTargets::AllLinear },
            _ => Method::Qlora { rank, targets: LoraTargets::Attention, double_quantization: true },
        };
        let setup = TrainingSetup {
            method,
            precision: precision(precision_index),
            optimizer: optimizer(optimizer_index),
            micro_batch,
            gradient_accumulation_steps: 1,
            sequence_length,
            checkpointing: if checkpointing { Checkpointing::Full } else { Checkpointing::None },
            attention: if eager { Attention::Eager } else { Attention::Flash },
            gpus,
            sharding: sharding(sharding_index),
            offload: Offload::None,
            task: gputune::plan::setup::Task::LanguageModel,
            activation_offload,
            chunked_cross_entropy,
            overheads: Overheads { cuda_context_bytes: context_mib.saturating_mul(1 << 20), allocator_reserve_fraction: reserve },
        };
        match estimate(&model, &setup) {
            Ok(breakdown) => {
                prop_assert!(breakdown.total() >= breakdown.weights);
                if let Some(rtx4090) = card("RTX 4090") {
                    let recommendation = recommend(&model, &setup, &rtx4090, 64);
                    prop_assert!(recommendation.is_ok());
                }
            }
            Err(error) => prop_assert!(!error.to_string().is_empty()),
        }
    }

    /// More micro-batch or a longer sequence never needs less memory.
    #[test]
    fn memory_grows_with_batch_and_sequence(
        model_index in 0usize..PRESET_NAMES.len(),
        micro_batch in 1u64..32,
        sequence_length in 16u64..4_096,
    ) {
        let Some(model) = preset(PRESET_NAMES[model_index]) else { return Err(TestCaseError::fail("preset")) };
        let base = TrainingSetup::new(micro_batch, sequence_length);
        let bigger_batch = TrainingSetup { micro_batch: micro_batch + 1, ..base };
        let longer = TrainingSetup { sequence_length: sequence_length * 2, ..base };
        let total = |setup: &TrainingSetup| estimate(&model, setup).map(|breakdown| breakdown.total()).unwrap_or(0);
        prop_assert!(total(&bigger_batch) >= total(&base));
        prop_assert!(total(&longer) >= total(&base));
    }

    #[test]
    fn accumulation_reaches_the_target(target in 0u64..100_000, micro in 0u64..512, gpus in 0u64..64) {
        let steps = gradient_accumulation_steps(target, micro, gpus);
        prop_assert!(steps >= 1);
        prop_assert!(steps * micro.max(1) * gpus.max(1) >= target);
        prop_assert!((steps - 1) * micro.max(1) * gpus.max(1) < target.max(1));
    }
}

#[test]
fn the_largest_micro_batch_fits_and_one_more_does_not() {
    let (Some(model), Some(rtx4090)) = (preset("llama-3.2-1b"), card("RTX 4090")) else {
        panic!("preset and card")
    };
    let setup = TrainingSetup {
        method: Method::Lora {
            rank: 16,
            targets: LoraTargets::AllLinear,
        },
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(1, 2048)
    };
    let largest = max_micro_batch(&model, &setup, rtx4090.memory_bytes)
        .ok()
        .flatten()
        .unwrap_or(0);
    assert!(largest >= 1);
    let fits = |micro_batch| {
        estimate(
            &model,
            &TrainingSetup {
                micro_batch,
                ..setup
            },
        )
        .map(|breakdown| gputune::plan::recommend::fits(&breakdown, rtx4090.memory_bytes))
        .unwrap_or(false)
    };
    assert!(fits(largest));
    assert!(!fits(largest + 1));
}

#[test]
fn sharding_and_qlora_shrink_what_each_gpu_holds() {
    let Some(model) = preset("llama-2-70b") else {
        panic!("preset")
    };
    let single = estimate(&model, &TrainingSetup::new(1, 2048))
        .map(|b| b.total())
        .unwrap_or(0);
    let fsdp = estimate(
        &model,
        &TrainingSetup {
            gpus: 8,
            sharding: Sharding::Fsdp,
            ..TrainingSetup::new(1, 2048)
        },
    )
    .map(|b| b.total())
    .unwrap_or(u64::MAX);
    assert!(fsdp * 4 < single, "FSDP over 8 GPUs: {fsdp} vs {single}");
    let qlora = estimate(
        &model,
        &TrainingSetup {
            method: Method::Qlora {
                rank: 16,
                targets: LoraTargets::AllLinear,
                double_quantization: true,
            },
            checkpointing: Checkpointing::Full,
            ..TrainingSetup::new(1, 2048)
        },
    );
    let qlora_weights = qlora.map(|b| b.weights).unwrap_or(u64::MAX) as f64 / (1u64 << 30) as f64;
    // 70 B parameters in NF4 with double quantization: about 35-37 GiB.
    assert!((33.0..40.0).contains(&qlora_weights), "{qlora_weights} GiB");
}

#[test]
fn bad_input_is_one_clear_sentence() {
    let Some(model) = preset("gpt2") else {
        panic!("preset")
    };
    let error = estimate(&model, &TrainingSetup::new(0, 1024))
        .err()
        .map(|error| error.to_string());
    assert_eq!(
        error.as_deref(),
        Some("The micro-batch must be between 1 and 1048576, not 0.")
    );
    let several = TrainingSetup {
        gpus: 4,
        ..TrainingSetup::new(1, 1024)
    };
    assert!(
        estimate(&model, &several).is_err(),
        "4 GPUs with no data parallelism"
    );
}
