//! The planner's parameter and LoRA counts for every family it reads, against Hugging Face
//! `transformers` and PEFT on the same released configs (tests/data/families/, written by
//! tools/family_counts.py): exact, parameter for parameter.

use std::path::Path;

use serde::Deserialize;

use gputune_core::plan::import::load_model;
use gputune_core::plan::memory::parameter_counts;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::Method;

#[derive(Deserialize)]
struct Counts {
    model: Vec<Family>,
}

#[derive(Deserialize)]
struct Family {
    name: String,
    model_type: String,
    parameters: u64,
    lora_attention: u64,
    lora_all_linear: u64,
}

const RANK: u64 = 16;

fn families() -> Counts {
    let folder =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/data/families");
    let text = std::fs::read_to_string(folder.join("counts.toml"))
        .unwrap_or_else(|error| panic!("counts.toml: {error}"));
    toml::from_str(&text).unwrap_or_else(|error| panic!("counts.toml: {error}"))
}

#[test]
fn parameter_and_lora_counts_match_transformers_for_every_family() {
    let folder =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/data/families");
    let counts = families();
    let mut types: Vec<&str> = counts.model.iter().map(|m| m.model_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    // Every family the importer reads is covered.
    assert_eq!(types.len(), 13, "{types:?}");
    for family in &counts.model {
        let path = folder.join(format!("{}.json", family.name));
        let model = load_model(&path).unwrap_or_else(|error| panic!("{}: {error}", family.name));
        assert_eq!(
            model.parameter_count(),
            family.parameters,
            "{}: parameters",
            family.name
        );
        for (targets, expected) in [
            (LoraTargets::Attention, family.lora_attention),
            (LoraTargets::AllLinear, family.lora_all_linear),
        ] {
            let method = Method::Lora {
                rank: RANK,
                targets,
            };
            let trainable = parameter_counts(&model, &method).trainable as u64;
            assert_eq!(trainable, expected, "{}: LoRA {targets:?}", family.name);
        }
    }
}
