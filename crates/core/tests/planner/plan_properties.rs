//! The planner never panics or overflows, whatever it is asked, and behaves monotonically
//! where memory must grow. The recommendation chooses: a micro-batch that divides the target
//! (or names the nearest global batch), the cheapest fallbacks in speed first, and keeps the
//! user's own setup beside it. Expected numbers come from `estimate` itself.

use proptest::prelude::*;

use gputune_core::plan::memory::estimate;
use gputune_core::plan::model::{Model, PRESET_NAMES, preset};
use gputune_core::plan::recommend::{
    FALLBACK_ORDER, GpuCard, Recommendation, card, cards, fits, gradient_accumulation_steps,
    max_micro_batch, recommend, recommend_for_target,
};
use gputune_formats::reports::plan::ChangeKind;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Overheads, Precision, Sharding, Task,
    TrainingSetup,
};

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
        reserve in prop_oneof![Just(None), Just(Some(f64::NAN)), Just(Some(-1.0)), (0.0f64..2.0).prop_map(Some), Just(Some(f64::INFINITY))],
        expandable in any::<bool>(),
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
            task: gputune_formats::reports::plan_setup::Task::LanguageModel,
            activation_offload,
            chunked_cross_entropy,
            overheads: Overheads { cuda_context_bytes: context_mib.saturating_mul(1 << 20), allocator: if expandable { gputune_formats::reports::plan_setup::Allocator::ExpandableSegments } else { gputune_formats::reports::plan_setup::Allocator::Default }, allocator_reserve_fraction: reserve },
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

    /// Whatever is asked, a recommendation fits, reaches the target exactly or says which
    /// global batch it reaches instead, flags a user's global batch that misses it, and lists
    /// its changes cheapest first.
    #[test]
    fn recommendations_fit_reach_the_target_or_say_so(
        model_index in 0usize..PRESET_NAMES.len(),
        card_index in 0usize..8,
        method_index in 0u8..3,
        precision_index in 0u8..4,
        micro_batch in 1u64..24,
        target in prop_oneof![Just(None), (1u64..600).prop_map(Some)],
        gpus in 1u64..4,
        checkpointing in any::<bool>(),
    ) {
        let Some(model) = preset(PRESET_NAMES[model_index]) else { return Err(TestCaseError::fail("preset")) };
        let card = cards().remove(card_index);
        let method = match method_index {
            0 => Method::Full,
            1 => Method::Lora { rank: 16, targets: LoraTargets::AllLinear },
            _ => Method::Qlora { rank: 16, targets: LoraTargets::AllLinear, double_quantization: true },
        };
        let setup = TrainingSetup {
            method,
            precision: precision(precision_index),
            checkpointing: if checkpointing { Checkpointing::Full } else { Checkpointing::None },
            gpus,
            sharding: if gpus > 1 { Sharding::Ddp } else { Sharding::None },
            ..TrainingSetup::new(micro_batch, if model.is_vision() { 224 } else { 1024 })
        };
        let Ok(answer) = recommend_for_target(&model, &setup, &card, target) else {
            // Only setups the model refuses (LoRA on a CNN, QLoRA in fp32) have no answer.
            prop_assert!(estimate(&model, &setup).is_err());
            return Ok(());
        };
        check_recommendation(&model, &setup, &card, target, &answer)?;
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
        .map(|breakdown| gputune_core::plan::recommend::fits(&breakdown, rtx4090.memory_bytes))
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

/// What every recommendation must hold (see `recommendations_fit_reach_the_target_or_say_so`).
fn check_recommendation(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
    target: Option<u64>,
    answer: &Recommendation,
) -> Result<(), TestCaseError> {
    let yours = &answer.yours;
    prop_assert_eq!(yours.setup.micro_batch, setup.micro_batch);
    prop_assert_eq!(
        estimate(model, &yours.setup).map(|b| b.total()).ok(),
        Some(yours.per_gpu_bytes)
    );
    let at_one = TrainingSetup {
        micro_batch: 1,
        gradient_accumulation_steps: target.map_or(1, |target| {
            gradient_accumulation_steps(target, 1, setup.gpus)
        }),
        ..*setup
    };
    let fits_at_one =
        estimate(model, &at_one).is_ok_and(|breakdown| fits(&breakdown, card.memory_bytes));
    prop_assert_eq!(answer.fits_as_set_up, fits_at_one);
    if let Some(target) = target
        && yours.global_batch != target
    {
        let flagged = format!("not your target of {target}");
        prop_assert!(
            answer
                .batch_notes
                .iter()
                .any(|note| note.contains(&flagged)),
            "{:?}",
            answer.batch_notes
        );
    }
    let Some(planned) = &answer.recommended else {
        prop_assert!(!answer.fits_as_set_up);
        prop_assert!(answer.summary.contains("in any strategy"));
        return Ok(());
    };
    prop_assert!(planned.fits, "{}", answer.summary);
    prop_assert_eq!(
        planned.global_batch,
        planned.setup.micro_batch * planned.setup.gradient_accumulation_steps * setup.gpus
    );
    if let Some(target) = target
        && planned.global_batch != target
    {
        prop_assert!(
            answer
                .batch_notes
                .iter()
                .any(|note| note.contains("nearest")
                    || note.contains("short of your target")
                    || note.contains("less than one sample")),
            "{} for {target}: {:?}",
            planned.global_batch,
            answer.batch_notes
        );
    }
    let kinds: Vec<ChangeKind> = answer.changes.iter().map(|change| change.kind).collect();
    if answer.fits_as_set_up {
        prop_assert!(
            kinds.iter().all(|kind| *kind == ChangeKind::Precision),
            "{:?}",
            kinds
        );
        prop_assert_eq!(planned.setup.method, setup.method);
    }
    // Precision and method lead; the fallbacks follow in their order, cheapest in speed first.
    let order = |kind: &ChangeKind| FALLBACK_ORDER.iter().position(|fallback| fallback == kind);
    let fallbacks: Vec<usize> = kinds.iter().filter_map(order).collect();
    prop_assert!(
        fallbacks.windows(2).all(|pair| pair[0] < pair[1]),
        "{:?}",
        kinds
    );
    let leading = kinds
        .iter()
        .take_while(|kind| order(kind).is_none())
        .count();
    prop_assert_eq!(leading + fallbacks.len(), kinds.len(), "{:?}", kinds);
    if planned.setup.activation_offload && !setup.activation_offload {
        prop_assert_eq!(planned.setup.checkpointing, Checkpointing::Full);
        prop_assert!(!model.is_vision());
    }
    Ok(())
}

fn rtx4090() -> GpuCard {
    card("RTX 4090").unwrap_or_else(|| panic!("the RTX 4090 is a built-in card"))
}

fn model(name: &str) -> Model {
    preset(name).unwrap_or_else(|| panic!("preset {name}"))
}

/// Per-GPU bytes at micro-batch 1 with the accumulation a target of `target` needs there.
fn bytes_at_one(model: &Model, setup: &TrainingSetup, target: u64) -> u64 {
    let at_one = TrainingSetup {
        micro_batch: 1,
        gradient_accumulation_steps: gradient_accumulation_steps(target, 1, setup.gpus),
        ..*setup
    };
    estimate(model, &at_one).map_or(u64::MAX, |breakdown| breakdown.total())
}

fn fits_at_one(model: &Model, setup: &TrainingSetup, target: u64, card: &GpuCard) -> bool {
    (bytes_at_one(model, setup, target) as f64) <= card.memory_bytes as f64 * 0.95
}

fn kinds(answer: &Recommendation) -> Vec<ChangeKind> {
    answer.changes.iter().map(|change| change.kind).collect()
}

fn answer(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
    target: Option<u64>,
) -> Recommendation {
    recommend_for_target(model, setup, card, target).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn resnet50_never_gets_micro_batch_1_when_more_fits() {
    let resnet = model("resnet50");
    for card in cards() {
        for target in [
            None,
            Some(2),
            Some(16),
            Some(32),
            Some(33),
            Some(256),
            Some(1000),
        ] {
            for micro_batch in [1, 64] {
                let setup = TrainingSetup {
                    precision: Precision::Fp16Mixed,
                    optimizer: Optimizer::SgdMomentum,
                    task: Task::Classification,
                    ..TrainingSetup::new(micro_batch, 224)
                };
                let answer = answer(&resnet, &setup, &card, target);
                let Some(planned) = &answer.recommended else {
                    panic!("ResNet-50 fits a {}", card.name)
                };
                let largest = max_micro_batch(&resnet, &planned.setup, card.memory_bytes)
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                assert!(largest > 1, "{}", card.name);
                assert!(
                    planned.setup.micro_batch > 1,
                    "{} target {target:?}: {}",
                    card.name,
                    answer.summary
                );
                assert_eq!(answer.yours.setup.micro_batch, micro_batch);
                if let Some(target) = target
                    && largest >= target
                {
                    // The whole target in one step.
                    assert_eq!(
                        (
                            planned.setup.micro_batch,
                            planned.setup.gradient_accumulation_steps
                        ),
                        (target, 1)
                    );
                }
            }
        }
    }
}

#[test]
fn a_target_of_32_gets_a_divisor_and_3_times_11_is_flagged() {
    let llama = model("llama-3.1-8b");
    let setup = TrainingSetup {
        method: Method::Qlora {
            rank: 16,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(3, 2048)
    };
    let answer = answer(&llama, &setup, &rtx4090(), Some(32));
    let yours = &answer.yours;
    assert_eq!(
        (
            yours.setup.micro_batch,
            yours.setup.gradient_accumulation_steps,
            yours.global_batch
        ),
        (3, 11, 33)
    );
    assert!(
        answer
            .batch_notes
            .iter()
            .any(|note| note.contains("3 × 11 = 33, not your target of 32")),
        "{:?}",
        answer.batch_notes
    );
    let Some(planned) = &answer.recommended else {
        panic!("QLoRA 8B fits an RTX 4090 with checkpointing")
    };
    assert_eq!(planned.global_batch, 32);
    assert_eq!(32 % planned.setup.micro_batch, 0);
    assert!(planned.fits);
}

#[test]
fn qlora_8b_without_checkpointing_is_told_to_turn_it_on_not_to_switch_method() {
    let llama = model("llama-3.1-8b");
    let card = rtx4090();
    let setup = TrainingSetup {
        method: Method::Qlora {
            rank: 16,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        // 3072 tokens: at 2048 chunked cross-entropy alone now fits.
        ..TrainingSetup::new(1, 3072)
    };
    assert!(
        !fits_at_one(&llama, &setup, 32, &card),
        "the case needs a setup that does not fit"
    );
    // The changes cheaper in speed than checkpointing are not enough on their own.
    let cheaper = TrainingSetup {
        optimizer: Optimizer::PagedAdamw8bit,
        chunked_cross_entropy: true,
        ..setup
    };
    assert!(!fits_at_one(&llama, &cheaper, 32, &card));
    let answer = answer(&llama, &setup, &card, Some(32));
    assert!(!answer.fits_as_set_up);
    assert_eq!(
        kinds(&answer),
        vec![ChangeKind::Checkpointing],
        "{}",
        answer.summary
    );
    let checkpointed = TrainingSetup {
        checkpointing: Checkpointing::Full,
        ..setup
    };
    assert_eq!(
        answer.changes[0].per_gpu_bytes,
        bytes_at_one(&llama, &checkpointed, 32)
    );
    let expected = format!(
        "turn on gradient checkpointing ({:.2} GiB)",
        bytes_at_one(&llama, &checkpointed, 32) as f64 / (1u64 << 30) as f64
    );
    assert!(answer.summary.contains(&expected), "{}", answer.summary);
    assert!(!answer.summary.contains("use LoRA"), "{}", answer.summary);
    let planned = answer.recommended.as_ref().map(|planned| planned.setup);
    assert_eq!(planned.map(|setup| setup.method), Some(setup.method));
}

#[test]
fn a_full_fine_tune_switches_method_only_when_no_fallback_is_enough() {
    let card = rtx4090();
    // Llama 3.2 1B: 8-bit AdamW and checkpointing are enough; the method stays.
    let small = model("llama-3.2-1b");
    let full = TrainingSetup::new(1, 2048);
    let answer_small = answer(&small, &full, &card, Some(32));
    assert!(
        !kinds(&answer_small).contains(&ChangeKind::Method),
        "{}",
        answer_small.summary
    );
    assert!(
        answer_small
            .recommended
            .is_some_and(|planned| planned.setup.method == Method::Full)
    );
    // Llama 3.1 8B: every fallback together still does not fit a full fine-tune.
    let large = model("llama-3.1-8b");
    let everything = TrainingSetup {
        optimizer: Optimizer::Adamw8bit,
        chunked_cross_entropy: true,
        checkpointing: Checkpointing::Full,
        activation_offload: true,
        precision: Precision::Bf16,
        ..full
    };
    assert!(!fits_at_one(&large, &everything, 32, &card));
    let answer_large = answer(&large, &full, &card, Some(32));
    let changes = kinds(&answer_large);
    assert_eq!(
        changes.first(),
        Some(&ChangeKind::Method),
        "{}",
        answer_large.summary
    );
    // LoRA, with fallbacks, before QLoRA.
    let lora = Method::Lora {
        rank: 16,
        targets: LoraTargets::AllLinear,
    };
    assert_eq!(
        answer_large
            .recommended
            .as_ref()
            .map(|planned| planned.setup.method),
        Some(lora)
    );
}

#[test]
fn activation_offloading_comes_after_checkpointing_and_before_another_method() {
    let llama = model("llama-3.1-8b");
    let card = rtx4090();
    let qlora = Method::Qlora {
        rank: 16,
        targets: LoraTargets::AllLinear,
        double_quantization: true,
    };
    let offloaded = [8_192u64, 16_384, 20_480, 24_576, 32_768, 65_536]
        .into_iter()
        .find_map(|tokens| {
            let setup = TrainingSetup {
                method: qlora,
                ..TrainingSetup::new(1, tokens)
            };
            let answer = answer(&llama, &setup, &card, Some(8));
            kinds(&answer)
                .contains(&ChangeKind::ActivationOffload)
                .then_some((setup, answer))
        });
    let Some((setup, answer)) = offloaded else {
        panic!("a long enough sequence needs activation offloading")
    };
    let changes = kinds(&answer);
    assert!(!changes.contains(&ChangeKind::Method), "{changes:?}");
    let position = |kind| changes.iter().position(|change| *change == kind);
    assert!(position(ChangeKind::Checkpointing) < position(ChangeKind::ActivationOffload));
    // Checkpointing and the cheaper changes alone do not fit; with offloading it does.
    let without_offload = TrainingSetup {
        optimizer: Optimizer::PagedAdamw8bit,
        chunked_cross_entropy: true,
        checkpointing: Checkpointing::Full,
        ..setup
    };
    assert!(!fits_at_one(&llama, &without_offload, 8, &card));
    assert!(answer.recommended.is_some_and(|planned| planned.fits));
    assert!(
        answer
            .batch_notes
            .iter()
            .any(|note| note.contains("pinned CPU memory"))
    );
}

#[test]
fn bf16_mixed_is_preferred_over_pure_bf16_where_it_fits() {
    let card = rtx4090();
    let pure = TrainingSetup {
        precision: Precision::Bf16,
        ..TrainingSetup::new(4, 1024)
    };
    // GPT-2 fits in bf16 mixed with room to spare: the advice's precision is recommended.
    let gpt2 = answer(&model("gpt2"), &pure, &card, Some(32));
    assert!(gpt2.fits_as_set_up);
    assert_eq!(kinds(&gpt2), vec![ChangeKind::Precision]);
    assert_eq!(
        gpt2.recommended.map(|planned| planned.setup.precision),
        Some(Precision::Bf16Mixed)
    );
    // Llama 3.2 3B fits only in pure bf16: the user's precision stays.
    let llama = model("llama-3.2-3b");
    let mixed = TrainingSetup {
        precision: Precision::Bf16Mixed,
        ..pure
    };
    assert!(fits_at_one(&llama, &pure, 32, &card) || !fits_at_one(&llama, &mixed, 32, &card));
    let kept = answer(&llama, &pure, &card, Some(32));
    if !fits_at_one(&llama, &mixed, 32, &card) {
        assert!(
            !kinds(&kept).contains(&ChangeKind::Precision),
            "{}",
            kept.summary
        );
        assert_eq!(
            kept.recommended.map(|planned| planned.setup.precision),
            Some(Precision::Bf16)
        );
    }
}
