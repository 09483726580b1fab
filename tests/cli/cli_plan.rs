//! `gputune plan` as scripts use it: exact flag names, JSON keys, exit statuses, clear errors,
//! exports that carry the recommendation and load as Hugging Face `TrainingArguments`.

use std::process::Output;

use serde_json::Value;

use gputune_core::plan::model::PRESET_NAMES;

/// Every field of `TrainingArguments` in transformers 5.23.0, as
/// `[f.name for f in dataclasses.fields(TrainingArguments)]` lists them
/// (tools/hf_export_check checks the exports against the installed transformers itself).
const TRAINING_ARGUMENTS_FIELDS: [&str; 114] = [
    "accelerator_config",
    "activation_checkpointing",
    "activation_checkpointing_kwargs",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "auto_find_batch_size",
    "average_tokens_across_devices",
    "batch_eval_metrics",
    "bf16",
    "bf16_full_eval",
    "data_seed",
    "dataloader_drop_last",
    "dataloader_in_order",
    "dataloader_multiprocessing_context",
    "dataloader_num_workers",
    "dataloader_persistent_workers",
    "dataloader_pin_memory",
    "dataloader_prefetch_factor",
    "ddp_backend",
    "ddp_broadcast_buffers",
    "ddp_bucket_cap_mb",
    "ddp_find_unused_parameters",
    "ddp_static_graph",
    "ddp_timeout",
    "debug",
    "deepspeed",
    "disable_tqdm",
    "do_eval",
    "do_predict",
    "do_train",
    "enable_jit_checkpoint",
    "eval_accumulation_steps",
    "eval_delay",
    "eval_do_concat_batches",
    "eval_on_start",
    "eval_steps",
    "eval_strategy",
    "eval_use_gather_object",
    "fp16",
    "fp16_full_eval",
    "fsdp",
    "fsdp_config",
    "full_determinism",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "greater_is_better",
    "hub_always_push",
    "hub_model_id",
    "hub_private_repo",
    "hub_revision",
    "hub_strategy",
    "hub_token",
    "ignore_data_skip",
    "include_for_metrics",
    "include_num_input_tokens_seen",
    "label_names",
    "label_smoothing_factor",
    "learning_rate",
    "length_column_name",
    "liger_kernel_config",
    "load_best_model_at_end",
    "local_rank",
    "log_level",
    "log_level_replica",
    "log_on_each_node",
    "logging_first_step",
    "logging_nan_inf_filter",
    "logging_steps",
    "logging_strategy",
    "lr_scheduler_kwargs",
    "lr_scheduler_type",
    "max_grad_norm",
    "max_steps",
    "metric_for_best_model",
    "neftune_noise_alpha",
    "num_train_epochs",
    "optim",
    "optim_args",
    "optim_target_modules",
    "output_dir",
    "parallelism_config",
    "per_device_eval_batch_size",
    "per_device_train_batch_size",
    "prediction_loss_only",
    "project",
    "push_to_hub",
    "remove_unused_columns",
    "report_to",
    "restore_callback_states_from_checkpoint",
    "resume_from_checkpoint",
    "run_name",
    "save_on_each_node",
    "save_only_model",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "seed",
    "skip_memory_metrics",
    "tf32",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "torch_empty_cache_steps",
    "trackio_bucket_id",
    "trackio_space_id",
    "trackio_static_space_id",
    "train_sampling_strategy",
    "use_cache",
    "use_cpu",
    "use_liger_kernel",
    "warmup_steps",
    "weight_decay",
];

/// `optim` values transformers 5.23.0 accepts that gputune writes.
const OPTIM_NAMES: [&str; 6] = [
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_bnb_8bit",
    "paged_adamw_8bit",
    "adafactor",
    "sgd",
];

fn plan(arguments: &[&str]) -> Output {
    let scratch = crate::common::Scratch::new();
    scratch
        .command(&["plan"])
        .args(arguments)
        .args(["--backend", "sim"])
        .output()
        .expect("the gputune binary runs")
}

/// The JSON report of a plan that fits (exit status 0).
fn json(arguments: &[&str]) -> Value {
    json_with_status(arguments, 0)
}

/// The JSON report, checking the exit status.
fn json_with_status(arguments: &[&str], status: i32) -> Value {
    let output = plan(&[arguments, &["--json"]].concat());
    assert_eq!(
        output.status.code(),
        Some(status),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn list_models_names_every_preset() {
    let output = plan(&["--list-models"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().count(), PRESET_NAMES.len());
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
    // The options given come back in the report's own names (docs/json.md).
    assert_eq!(report["format_version"], 1);
    let setup = &report["yours"]["setup"];
    assert_eq!(setup["method"]["type"], "qlora", "{setup}");
    assert_eq!(setup["method"]["targets"], "all_linear", "{setup}");
    assert_eq!(setup["precision"], "bf16_mixed", "{setup}");
    assert_eq!(setup["optimizer"], "paged_adamw_8bit", "{setup}");
    assert_eq!(setup["attention"], "flash", "{setup}");
    let parts = &report["breakdown_bytes"];
    let sum: u64 = [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "temporaries",
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
    assert!(
        report["max_micro_batch"]
            .as_u64()
            .is_some_and(|batch| batch >= 2)
    );
    // The recommendation: a micro-batch that divides 32, the accumulation to reach it.
    let recommended = &report["recommended"];
    let micro_batch = recommended["setup"]["micro_batch"].as_u64().unwrap_or(0);
    assert!(micro_batch >= 2 && 32 % micro_batch == 0, "{recommended}");
    assert_eq!(report["grad_accum_steps"].as_u64(), Some(32 / micro_batch));
    assert_eq!(recommended["global_batch"], 32);
    assert_eq!(recommended["fits"], true);
    // The user's own setup stays as a row, with its numbers.
    assert_eq!(report["yours"]["setup"]["micro_batch"], 2);
    assert_eq!(report["yours"]["setup"]["gradient_accumulation_steps"], 16);
    assert_eq!(report["yours"]["per_gpu_bytes"], report["per_gpu_bytes"]);
    assert_eq!(report["fits_as_set_up"], true);
    assert_eq!(report["target_global_batch"], 32);
    assert_eq!(
        report["model_load"]["quantization_config"]["load_in_4bit"],
        true
    );
}

#[test]
fn a_full_fine_tune_of_a_70b_model_does_not_fit_and_says_what_would() {
    let report = json_with_status(
        &[
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
        ],
        3,
    );
    assert_eq!(report["fits"], false);
    assert_eq!(report["recommended"], Value::Null);
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
        let scratch = crate::common::Scratch::new();
        let output = scratch
            .command(&["plan"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
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
            "--checkpointing",
            "full",
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

/// The arguments of QLoRA 8B on an RTX 4090 without checkpointing at 3072 tokens: it does not
/// fit as set, and only checkpointing makes it fit.
const QLORA_8B_NO_CHECKPOINTING: [&str; 14] = [
    "--model",
    "llama-3.1-8b",
    "--method",
    "qlora",
    "--lora-targets",
    "all-linear",
    "--card",
    "RTX 4090",
    "--target-batch",
    "32",
    "--checkpointing",
    "none",
    "--seq-len",
    "3072",
];

#[test]
fn a_plan_that_does_not_fit_exits_3_and_writes_nothing_unless_forced() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("training_args.json");
    let path_text = path.display().to_string();
    let export = ["--export", &path_text, "--format", "hf"];
    let refused = plan(&[&QLORA_8B_NO_CHECKPOINTING[..], &export].concat());
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(!path.exists(), "nothing written without --force");
    let message = stderr(&refused);
    for words in ["nothing written to", "--checkpointing full", "--force"] {
        assert!(message.contains(words), "{words}: {message}");
    }
    // The report still says what to do.
    let report = String::from_utf8_lossy(&refused.stdout);
    assert!(
        report.contains("turn on gradient checkpointing"),
        "{report}"
    );

    let forced = plan(&[&QLORA_8B_NO_CHECKPOINTING[..], &export, &["--force"]].concat());
    assert_eq!(forced.status.code(), Some(3), "{}", stderr(&forced));
    assert!(
        stderr(&forced).contains("Wrote your setup"),
        "{}",
        stderr(&forced)
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
        .unwrap_or(Value::Null);
    // --force writes the user's own setup: micro-batch 1, no checkpointing.
    assert_eq!(written["per_device_train_batch_size"], 1);
    assert_eq!(written["gradient_accumulation_steps"], 32);
    assert_eq!(written["gradient_checkpointing"], false);
}

#[test]
fn a_plan_that_fits_exports_the_recommendation() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("training_args.json");
    let path_text = path.display().to_string();
    let arguments = [
        &QLORA_8B_NO_CHECKPOINTING[..10],
        &["--checkpointing", "full", "--micro-batch", "3"],
    ]
    .concat();
    let report = json(&arguments);
    let output = plan(&[&arguments[..], &["--export", &path_text, "--format", "hf"]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("Wrote the recommended setup"));
    assert!(
        stderr(&output).contains("LoraConfig(") && stderr(&output).contains("BitsAndBytesConfig(")
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
        .unwrap_or(Value::Null);
    let recommended = &report["recommended"]["setup"];
    assert_eq!(
        written["per_device_train_batch_size"],
        recommended["micro_batch"]
    );
    assert_eq!(
        written["gradient_accumulation_steps"],
        recommended["gradient_accumulation_steps"]
    );
    // Not the user's 3 × 11 = 33.
    assert_ne!(written["per_device_train_batch_size"], 3);
    assert_eq!(written["gradient_checkpointing"], true);
}

#[test]
fn hugging_face_exports_hold_only_training_arguments_fields() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let setups: [&[&str]; 9] = [
        &["--model", "llama-3.2-1b", "--method", "full"],
        &[
            "--model",
            "llama-3.2-1b",
            "--method",
            "lora",
            "--precision",
            "bf16",
        ],
        &[
            "--model",
            "llama-3.1-8b",
            "--method",
            "qlora",
            "--optimizer",
            "paged-adamw-8bit",
        ],
        &[
            "--model",
            "llama-3.2-3b",
            "--checkpointing",
            "full",
            "--activation-offload",
            "--chunked-cross-entropy",
            "--seq-len",
            "8192",
        ],
        &[
            "--model",
            "llama-3.1-8b",
            "--gpus",
            "4",
            "--sharding",
            "fsdp",
            "--checkpointing",
            "full",
        ],
        &[
            "--model",
            "llama-3.1-8b",
            "--gpus",
            "2",
            "--sharding",
            "zero3",
            "--offload",
            "optimizer",
        ],
        &[
            "--model",
            "gpt2",
            "--precision",
            "fp16-mixed",
            "--optimizer",
            "sgd-momentum",
        ],
        &["--model", "resnet50", "--optimizer", "adafactor"],
        &[
            "--model",
            "bert-base-uncased",
            "--task",
            "classification",
            "--optimizer",
            "adamw-fused",
        ],
    ];
    for (index, setup) in setups.iter().enumerate() {
        let path = directory.path().join(format!("{index}.json"));
        let path_text = path.display().to_string();
        let common = ["--card", "A100 80GB", "--target-batch", "64"];
        let export = ["--export", &path_text, "--format", "hf", "--force"];
        let output = plan(&[setup, &common[..], &export].concat());
        assert!(
            matches!(output.status.code(), Some(0 | 3)),
            "{setup:?}: {}",
            stderr(&output)
        );
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
                .unwrap_or(Value::Null);
        let Some(fields) = written.as_object() else {
            panic!("{setup:?} wrote a JSON object: {written}")
        };
        for key in fields.keys() {
            assert!(
                TRAINING_ARGUMENTS_FIELDS.contains(&key.as_str()),
                "{setup:?}: {key} is not a TrainingArguments field"
            );
        }
        assert!(
            written["optim"]
                .as_str()
                .is_some_and(|optim| OPTIM_NAMES.contains(&optim)),
            "{written}"
        );
        let report = json_with_status(
            &[setup, &common[..]].concat(),
            output.status.code().unwrap_or(1),
        );
        let planned = if report["fits_as_set_up"] == true {
            &report["recommended"]
        } else {
            &report["yours"]
        };
        assert_eq!(
            written["per_device_train_batch_size"],
            planned["setup"]["micro_batch"]
        );
    }
    // Activation offloading with checkpointing, and the chunked loss, as the Trainer says them.
    let offloaded: Value = serde_json::from_str(
        &std::fs::read_to_string(directory.path().join("3.json")).unwrap_or_default(),
    )
    .unwrap_or(Value::Null);
    assert_eq!(
        offloaded["gradient_checkpointing_kwargs"],
        serde_json::json!({"offload": true})
    );
    assert_eq!(offloaded["use_liger_kernel"], true);
}

#[test]
fn activation_offload_and_chunked_loss_reach_the_estimate() {
    let base = [
        "--model",
        "llama-3.2-1b",
        "--seq-len",
        "8192",
        "--checkpointing",
        "full",
        "--card",
        "H100 80GB",
    ];
    let plain = json(&base);
    let both = json(
        &[
            &base[..],
            &["--activation-offload", "--chunked-cross-entropy"],
        ]
        .concat(),
    );
    assert_eq!(both["yours"]["setup"]["activation_offload"], true);
    assert_eq!(both["yours"]["setup"]["chunked_cross_entropy"], true);
    assert_eq!(plain["yours"]["setup"]["activation_offload"], false);
    let bytes = |report: &Value| report["per_gpu_bytes"].as_u64().unwrap_or(0);
    assert!(
        bytes(&both) < bytes(&plain),
        "{} vs {}",
        bytes(&both),
        bytes(&plain)
    );
}

#[test]
fn the_text_report_keeps_your_setup_as_a_row_and_flags_33_against_32() {
    let output = plan(
        &[
            &QLORA_8B_NO_CHECKPOINTING[..10],
            &["--checkpointing", "full", "--micro-batch", "3"],
        ]
        .concat(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let row = |label: &str| {
        text.lines()
            .find(|line| line.trim_start().starts_with(label))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row("yours").contains("3 × 11 = 33"), "{text}");
    assert!(row("recommended").contains("= 32"), "{text}");
    assert!(
        text.contains("3 × 11 = 33, not your target of 32"),
        "{text}"
    );
}

#[test]
fn help_documents_the_exit_statuses_and_the_new_options() {
    let output = plan(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for words in [
        "Exit status:",
        "0  the setup fits",
        "3  the setup does not fit",
        "--force",
        "--activation-offload",
        "--chunked-cross-entropy",
    ] {
        assert!(help.contains(words), "{words}: {help}");
    }
}

#[test]
fn the_accelerate_export_says_in_comments_what_it_cannot_set() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("accelerate_config.yaml");
    let path_text = path.display().to_string();
    let output = plan(&[
        "--model",
        "llama-3.2-1b",
        "--checkpointing",
        "full",
        "--activation-offload",
        "--chunked-cross-entropy",
        "--card",
        "H100 80GB",
        "--target-batch",
        "16",
        "--export",
        &path_text,
        "--format",
        "accelerate",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    for words in [
        "# In torchtune, the same plan is: tune run",
        "enable_activation_offloading=True",
        "CEWithChunkedOutputLoss",
        "save_on_cpu",
    ] {
        assert!(text.contains(words), "{words}: {text}");
    }
}

/// `--allocator` picks the measured allocator model; the report says which context and which
/// allocator it assumed, and a bad reserve override is refused.
#[test]
fn the_allocator_option_changes_the_reserve_and_the_report_names_the_assumptions() {
    let base = [
        "--model",
        "gpt2",
        "--micro-batch",
        "8",
        "--seq-len",
        "1024",
        "--card",
        "H100 80GB",
    ];
    let reserve = |allocator: &str| {
        json(&[&base[..], &["--allocator", allocator]].concat())["breakdown_bytes"]["allocator_reserve"]
            .as_u64()
            .expect("allocator_reserve")
    };
    let default = reserve("default");
    let expandable = reserve("expandable-segments");
    assert!(
        expandable < default,
        "expandable {expandable} < default {default}"
    );
    let report = json(&base);
    assert_eq!(report["breakdown_bytes"]["cuda_context"], 762 * 1024 * 1024);
    let text = plan(&[&base[..], &["--allocator", "expandable-segments"]].concat());
    let text = String::from_utf8_lossy(&text.stdout);
    for words in [
        "0.74 GiB CUDA context",
        "differs per card and driver",
        "expandable-segments allocator",
    ] {
        assert!(text.contains(words), "{words}: {text}");
    }
    let refused = plan(&[&base[..], &["--allocator-reserve-pct", "150"]].concat());
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("between 0 and 100"),
        "{}",
        stderr(&refused)
    );
}
