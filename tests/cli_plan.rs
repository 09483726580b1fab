//! `gputune plan` as scripts use it: exact flag names, JSON keys, clear errors, exports.

use std::process::{Command, Output};

use serde_json::Value;

fn plan(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputune"))
        .arg("plan")
        .args(arguments)
        .args(["--backend", "sim"])
        .output()
        .expect("the gputune binary runs")
}

fn json(arguments: &[&str]) -> Value {
    let output = plan(&[arguments, &["--json"]].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

#[test]
fn list_models_names_every_preset() {
    let output = plan(&["--list-models"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().count(), 22);
    for name in [
        "gpt2",
        "llama-3.1-70b",
        "qwen2.5-14b",
        "vit-l-16",
        "resnet101",
        "convnext-large",
    ] {
        assert!(
            text.lines().any(|line| line.starts_with(name)),
            "{name} in {text}"
        );
    }
}

#[test]
fn json_has_the_documented_keys_and_a_consistent_breakdown() {
    let report = json(&[
        "--model",
        "llama-3.1-8b",
        "--method",
        "qlora",
        "--lora-rank",
        "16",
        "--lora-targets",
        "all-linear",
        "--precision",
        "bf16-mixed",
        "--optimizer",
        "paged-adamw-8bit",
        "--micro-batch",
        "2",
        "--seq-len",
        "2048",
        "--checkpointing",
        "full",
        "--attention",
        "flash",
        "--gpus",
        "1",
        "--sharding",
        "none",
        "--offload",
        "none",
        "--gpu-memory-gib",
        "24",
        "--target-batch",
        "32",
    ]);
    for key in [
        "per_gpu_bytes",
        "breakdown_bytes",
        "fits",
        "max_micro_batch",
        "grad_accum_steps",
    ] {
        assert!(report.get(key).is_some(), "{key} in {report}");
    }
    let parts = &report["breakdown_bytes"];
    let sum: u64 = [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "overhead",
    ]
    .iter()
    .map(|part| parts[part].as_u64().unwrap_or(u64::MAX / 8))
    .sum();
    assert_eq!(Some(sum), report["per_gpu_bytes"].as_u64());
    assert_eq!(
        report["fits"], true,
        "QLoRA 8B fits a 24 GiB card: {report}"
    );
    assert_eq!(report["grad_accum_steps"], 16);
    assert!(
        report["max_micro_batch"]
            .as_u64()
            .is_some_and(|batch| batch >= 2)
    );
}

#[test]
fn a_full_fine_tune_of_a_70b_model_does_not_fit_and_says_what_would() {
    let report = json(&[
        "--model",
        "llama-3.1-70b",
        "--method",
        "full",
        "--precision",
        "bf16-mixed",
        "--optimizer",
        "adamw",
        "--micro-batch",
        "1",
        "--card",
        "RTX 4090",
    ]);
    assert_eq!(report["fits"], false);
    assert_eq!(report["max_micro_batch"], Value::Null);
    assert!(
        report["summary"]
            .as_str()
            .is_some_and(|summary| summary.contains("Does not fit"))
    );
}

#[test]
fn multi_gpu_4090s_get_the_nccl_hint_and_vision_models_take_an_image_size() {
    let report = json(&[
        "--model",
        "llama-3.2-1b",
        "--method",
        "full",
        "--precision",
        "bf16-mixed",
        "--optimizer",
        "adamw",
        "--micro-batch",
        "1",
        "--gpus",
        "4",
        "--sharding",
        "fsdp",
        "--card",
        "RTX 4090",
    ]);
    let advice = report["advice"].to_string();
    assert!(advice.contains("NCCL_P2P_DISABLE=1"), "{advice}");
    let vision = json(&[
        "--model",
        "resnet50",
        "--method",
        "full",
        "--precision",
        "fp16-mixed",
        "--optimizer",
        "sgd-momentum",
        "--micro-batch",
        "64",
        "--image-size",
        "224",
        "--card",
        "RTX 3090",
    ]);
    assert_eq!(vision["fits"], true);
    assert!(vision["advice"].to_string().contains("bf16"), "{vision}");
}

#[test]
fn bad_input_is_one_clear_sentence() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--model", "gpt-7", "--micro-batch", "1"],
            "Unknown model \"gpt-7\"",
        ),
        (
            &["--model", "gpt2", "--micro-batch", "0"],
            "The micro-batch must be between 1",
        ),
        (
            &["--model", "tests/data/models/zero-layers/config.json"],
            "0 layers",
        ),
        (
            &["--model", "tests/data/models/tokenizer/tokenizer.json"],
            "tokenizer.json",
        ),
    ];
    for (arguments, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_gputune"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("plan")
            .args(arguments)
            .output()
            .expect("runs");
        assert!(!output.status.success(), "{arguments:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{arguments:?}: {stderr}");
    }
}

#[test]
fn export_writes_each_trainer_config() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    for format in ["hf", "accelerate", "deepspeed"] {
        let path = directory.path().join(format!("out-{format}"));
        let path_text = path.display().to_string();
        let output = plan(&[
            "--model",
            "llama-3.1-8b",
            "--method",
            "lora",
            "--precision",
            "bf16-mixed",
            "--optimizer",
            "adamw",
            "--micro-batch",
            "1",
            "--gpus",
            "2",
            "--sharding",
            "zero3",
            "--export",
            &path_text,
            "--format",
            format,
        ]);
        assert!(
            output.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.is_empty(), "{format} wrote something");
        if format != "accelerate" {
            assert!(
                serde_json::from_str::<Value>(&text).is_ok(),
                "{format} is JSON: {text}"
            );
        } else {
            assert!(text.contains("distributed_type: DEEPSPEED"), "{text}");
        }
    }
}
