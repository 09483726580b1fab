//! Trainer configs from a planned setup, so a run uses the settings the plan sized: Hugging Face
//! `TrainingArguments` (JSON), an `accelerate config` (YAML) or a DeepSpeed config (JSON).
//! Keys starting with `_gputune_` are not `TrainingArguments`: they carry the settings that
//! belong to the model load (PEFT, bitsandbytes, attention) and notes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::PlanError;
use super::model::{Architecture, LoraTargets, MlpKind, Model, TransformerKind};
use super::setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Precision, Sharding, TrainingSetup,
};

/// Which trainer config to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ExportFormat {
    /// Hugging Face `TrainingArguments` as JSON.
    Hf,
    /// An `accelerate config` YAML file.
    Accelerate,
    /// A DeepSpeed config JSON.
    Deepspeed,
}

impl ExportFormat {
    /// Every format, in the order menus show them.
    pub const ALL: [ExportFormat; 3] = [
        ExportFormat::Hf,
        ExportFormat::Accelerate,
        ExportFormat::Deepspeed,
    ];

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Hf => "hf",
            ExportFormat::Accelerate => "accelerate",
            ExportFormat::Deepspeed => "deepspeed",
        }
    }

    /// The format with this name (case ignored), as `name` gives it.
    pub fn from_name(name: &str) -> Option<ExportFormat> {
        ExportFormat::ALL
            .into_iter()
            .find(|format| format.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The file name the tools expect by convention.
    pub fn file_name(self) -> &'static str {
        match self {
            ExportFormat::Hf => "training_args.json",
            ExportFormat::Accelerate => "accelerate_config.yaml",
            ExportFormat::Deepspeed => "ds_config.json",
        }
    }
}

/// The config text for `setup` on `model` with `grad_accum_steps` micro-batches per step.
/// Refuses setups the target tool cannot express, saying what to change.
pub fn export_setup(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Result<String, PlanError> {
    super::memory::validate(model, setup)?;
    exportable(setup, grad_accum_steps, format)
        .map_err(|message| PlanError::InvalidInput(message.to_string()))?;
    Ok(match format {
        ExportFormat::Hf => format!("{:#}\n", hf(model, setup, grad_accum_steps)),
        ExportFormat::Accelerate => accelerate(model, setup, grad_accum_steps),
        ExportFormat::Deepspeed => format!("{:#}\n", deepspeed(setup, grad_accum_steps)),
    })
}

fn exportable(
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Result<(), String> {
    if !(1..=1_000_000).contains(&grad_accum_steps) {
        return Err(format!(
            "Gradient accumulation steps must be between 1 and 1000000, not {grad_accum_steps}."
        ));
    }
    let offload = setup.offload;
    match (setup.sharding, offload) {
        (Sharding::None | Sharding::Ddp, Offload::Optimizer | Offload::OptimizerAndParams) => {
            return Err("Offloading to the CPU is done by DeepSpeed ZeRO or FSDP: choose --sharding zero2, zero3 or fsdp, or --offload none.".into());
        }
        (Sharding::Zero1 | Sharding::Zero2, Offload::OptimizerAndParams) => {
            return Err("Offloading parameters to the CPU needs ZeRO stage 3: choose --sharding zero3 (or fsdp), or --offload optimizer.".into());
        }
        (Sharding::Fsdp, Offload::Optimizer) => {
            return Err("FSDP offloads parameters and optimizer state together: choose --offload optimizer+params, or --sharding zero2 or zero3 to offload only the optimizer.".into());
        }
        _ => {}
    }
    if offload != Offload::None
        && matches!(
            setup.optimizer,
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit
        )
    {
        return Err("8-bit optimizers (bitsandbytes) step on the GPU and cannot update state offloaded to the CPU: choose --optimizer adamw, or --offload none.".into());
    }
    if format == ExportFormat::Deepspeed && setup.sharding == Sharding::Fsdp {
        return Err("FSDP is PyTorch's sharding, not DeepSpeed's: export with --format hf or accelerate, or choose --sharding zero3 (DeepSpeed's equivalent of FSDP full shard).".into());
    }
    Ok(())
}

fn is_zero(sharding: Sharding) -> bool {
    matches!(
        sharding,
        Sharding::Zero1 | Sharding::Zero2 | Sharding::Zero3
    )
}

fn zero_stage(sharding: Sharding) -> u64 {
    match sharding {
        Sharding::Zero1 => 1,
        Sharding::Zero2 => 2,
        Sharding::Zero3 => 3,
        _ => 0,
    }
}

/// LoRA layer names as the model's Hugging Face implementation calls them.
fn lora_target_modules(model: &Model, targets: LoraTargets) -> Value {
    if targets == LoraTargets::AllLinear {
        return json!("all-linear");
    }
    match &model.architecture {
        Architecture::Transformer(config) if config.mlp == MlpKind::SwiGlu => {
            json!(["q_proj", "k_proj", "v_proj", "o_proj"])
        }
        Architecture::Transformer(config) if config.kind == TransformerKind::DecoderOnly => {
            json!(["c_attn", "attn.c_proj"])
        }
        _ => json!(["query", "key", "value", "attention.output.dense"]),
    }
}

fn compute_dtype(precision: Precision) -> &'static str {
    if precision == Precision::Fp16Mixed {
        "float16"
    } else {
        "bfloat16"
    }
}

/// Hugging Face `TrainingArguments` plus `_gputune_` keys for what belongs to the model load.
fn hf(model: &Model, setup: &TrainingSetup, grad_accum_steps: u64) -> Value {
    let fsdp = setup.sharding == Sharding::Fsdp;
    let checkpointing = setup.checkpointing == Checkpointing::Full;
    let offload_params = setup.offload == Offload::OptimizerAndParams;
    let mut notes: Vec<String> = Vec::new();
    let mut args = Map::new();
    args.insert(
        "per_device_train_batch_size".into(),
        json!(setup.micro_batch),
    );
    args.insert(
        "gradient_accumulation_steps".into(),
        json!(grad_accum_steps),
    );
    args.insert(
        "bf16".into(),
        json!(matches!(
            setup.precision,
            Precision::Bf16Mixed | Precision::Bf16
        )),
    );
    args.insert(
        "fp16".into(),
        json!(setup.precision == Precision::Fp16Mixed),
    );
    // With FSDP, Trainer refuses gradient_checkpointing: FSDP's own activation checkpointing does it.
    args.insert(
        "gradient_checkpointing".into(),
        json!(checkpointing && !fsdp),
    );
    let optim = match setup.optimizer {
        Optimizer::Adamw => "adamw_torch",
        Optimizer::AdamwFused => "adamw_torch_fused",
        Optimizer::Adamw8bit => "adamw_bnb_8bit",
        Optimizer::PagedAdamw8bit => "paged_adamw_8bit",
        Optimizer::Adafactor => "adafactor",
        Optimizer::Sgd | Optimizer::SgdMomentum => "sgd",
    };
    args.insert("optim".into(), json!(optim));
    if setup.precision == Precision::Bf16 {
        notes.push("Pure bf16: load the model in bfloat16 (torch_dtype=torch.bfloat16) so weights, gradients and optimizer states are bf16; bf16=true alone trains with fp32 weights.".to_string());
    }
    if setup.optimizer == Optimizer::SgdMomentum {
        notes.push("SGD with momentum: \"sgd\" has none, so pass torch.optim.SGD(model.parameters(), lr=..., momentum=0.9) as Trainer(optimizers=(optimizer, None)).".to_string());
    }
    if fsdp {
        let wrap = if offload_params {
            "full_shard auto_wrap offload"
        } else {
            "full_shard auto_wrap"
        };
        args.insert("fsdp".into(), json!(wrap));
        let mut fsdp_config = json!({
            "backward_prefetch": "backward_pre",
            "forward_prefetch": false,
            "use_orig_params": true,
            "sync_module_states": true,
            "cpu_ram_efficient_loading": true,
            "activation_checkpointing": checkpointing,
        });
        if matches!(model.architecture, Architecture::Cnn(_)) {
            // Torchvision CNNs name no block class to wrap: wrap by size instead.
            fsdp_config["min_num_params"] = json!(1_000_000);
        }
        args.insert("fsdp_config".into(), fsdp_config);
    }
    if is_zero(setup.sharding) {
        args.insert("deepspeed".into(), json!("ds_config.json"));
        notes.push(
            "Save gputune's DeepSpeed export as ds_config.json next to the training script."
                .to_string(),
        );
    }
    if setup.gpus > 1 {
        notes.push(format!(
            "Launch on all {gpus} GPUs: torchrun --nproc_per_node {gpus} train.py, or accelerate launch.",
            gpus = setup.gpus
        ));
    }
    if let Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } = setup.method {
        let peft = json!({"r": rank, "lora_alpha": 2 * rank, "target_modules": lora_target_modules(model, targets)});
        args.insert("_gputune_peft".into(), peft);
    }
    if let Method::Qlora {
        double_quantization,
        ..
    } = setup.method
    {
        let dtype = compute_dtype(setup.precision);
        let mut bnb = json!({
            "load_in_4bit": true,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": double_quantization,
            "bnb_4bit_compute_dtype": dtype,
        });
        if matches!(setup.sharding, Sharding::Fsdp | Sharding::Zero3) {
            // Sharding flattens parameters: 4-bit weights must be stored in the float type.
            bnb["bnb_4bit_quant_storage"] = json!(dtype);
        }
        args.insert("_gputune_bnb".into(), bnb);
    }
    let attention = match setup.attention {
        Attention::Eager => "eager",
        Attention::Sdpa => "sdpa",
        Attention::Flash => "flash_attention_2",
    };
    args.insert("_gputune_attn_implementation".into(), json!(attention));
    args.insert("_gputune_model".into(), json!(model.name));
    if !notes.is_empty() {
        args.insert("_gputune_note".into(), json!(notes.join(" ")));
    }
    Value::Object(args)
}

/// An `accelerate config` file, written by hand (flat keys and one level of blocks).
fn accelerate(model: &Model, setup: &TrainingSetup, grad_accum_steps: u64) -> String {
    let fsdp = setup.sharding == Sharding::Fsdp;
    let zero = is_zero(setup.sharding);
    let checkpointing = setup.checkpointing == Checkpointing::Full;
    let cpu_or_none = |offloaded: bool| if offloaded { "cpu" } else { "none" };
    let mut lines = vec![
        format!(
            "# accelerate config for {} from gputune's plan.",
            model.name.replace('\n', " ")
        ),
        format!(
            "# Micro-batch {} per GPU, gradient accumulation {grad_accum_steps} steps: give both to your training script.",
            setup.micro_batch
        ),
        "# Run: accelerate launch --config_file accelerate_config.yaml train.py".to_string(),
    ];
    if setup.precision == Precision::Bf16 {
        lines.push("# Pure bf16: load the model in bfloat16 (torch_dtype=torch.bfloat16); mixed_precision alone keeps fp32 weights.".into());
    }
    if checkpointing && !fsdp {
        lines.push(
            "# Activation checkpointing: call model.gradient_checkpointing_enable() in the script."
                .into(),
        );
    }
    if zero && setup.offload != Offload::None {
        lines.push("# CPU offload runs the optimizer step on the CPU: DeepSpeed's CPU AdamW is fastest (the deepspeed export sets it).".into());
    }
    lines.push("compute_environment: LOCAL_MACHINE".into());
    lines.push("debug: false".into());
    if zero {
        let stage = zero_stage(setup.sharding);
        lines.push("deepspeed_config:".into());
        lines.push(format!("  gradient_accumulation_steps: {grad_accum_steps}"));
        lines.push("  gradient_clipping: 1.0".into());
        lines.push(format!(
            "  offload_optimizer_device: {}",
            cpu_or_none(setup.offload != Offload::None)
        ));
        lines.push(format!(
            "  offload_param_device: {}",
            cpu_or_none(setup.offload == Offload::OptimizerAndParams)
        ));
        lines.push(format!("  zero3_init_flag: {}", stage == 3));
        if stage == 3 {
            lines.push("  zero3_save_16bit_model: true".into());
        }
        lines.push(format!("  zero_stage: {stage}"));
    }
    let distributed_type = match setup.sharding {
        Sharding::Fsdp => "FSDP",
        Sharding::Zero1 | Sharding::Zero2 | Sharding::Zero3 => "DEEPSPEED",
        Sharding::Ddp if setup.gpus > 1 => "MULTI_GPU",
        // Quoted: YAML 1.1 reads a bare NO as false.
        _ => "'NO'",
    };
    lines.push(format!("distributed_type: {distributed_type}"));
    lines.push("downcast_bf16: 'no'".into());
    if fsdp {
        let by_size = matches!(model.architecture, Architecture::Cnn(_));
        lines.push("fsdp_config:".into());
        lines.push(format!("  fsdp_activation_checkpointing: {checkpointing}"));
        let policy = if by_size {
            "SIZE_BASED_WRAP"
        } else {
            "TRANSFORMER_BASED_WRAP"
        };
        lines.push(format!("  fsdp_auto_wrap_policy: {policy}"));
        lines.push("  fsdp_backward_prefetch: BACKWARD_PRE".into());
        lines.push("  fsdp_cpu_ram_efficient_loading: true".into());
        lines.push("  fsdp_forward_prefetch: false".into());
        if by_size {
            lines.push("  fsdp_min_num_params: 1000000".into());
        }
        lines.push(format!(
            "  fsdp_offload_params: {}",
            setup.offload == Offload::OptimizerAndParams
        ));
        lines.push("  fsdp_sharding_strategy: FULL_SHARD".into());
        lines.push("  fsdp_state_dict_type: SHARDED_STATE_DICT".into());
        lines.push("  fsdp_sync_module_states: true".into());
        lines.push("  fsdp_use_orig_params: true".into());
    }
    lines.push("machine_rank: 0".into());
    lines.push("main_training_function: main".into());
    let mixed_precision = match setup.precision {
        Precision::Fp32 => "'no'",
        Precision::Fp16Mixed => "fp16",
        Precision::Bf16Mixed | Precision::Bf16 => "bf16",
    };
    lines.push(format!("mixed_precision: {mixed_precision}"));
    lines.push("num_machines: 1".into());
    lines.push(format!("num_processes: {}", setup.gpus));
    lines.push("rdzv_backend: static".into());
    lines.push("same_network: true".into());
    lines.push("use_cpu: false".into());
    lines.join("\n") + "\n"
}

/// A DeepSpeed config; unsharded setups get ZeRO stage 0.
fn deepspeed(setup: &TrainingSetup, grad_accum_steps: u64) -> Value {
    let stage = zero_stage(setup.sharding);
    let mut zero = json!({"stage": stage});
    if stage > 0 {
        zero["overlap_comm"] = json!(true);
        zero["contiguous_gradients"] = json!(true);
    }
    if stage == 3 {
        zero["stage3_gather_16bit_weights_on_model_save"] = json!(true);
    }
    if setup.offload != Offload::None {
        zero["offload_optimizer"] = json!({"device": "cpu", "pin_memory": true});
    }
    if setup.offload == Offload::OptimizerAndParams {
        zero["offload_param"] = json!({"device": "cpu", "pin_memory": true});
    }
    let fp16 = setup.precision == Precision::Fp16Mixed;
    let mut config = json!({
        "train_micro_batch_size_per_gpu": setup.micro_batch,
        "gradient_accumulation_steps": grad_accum_steps,
        "bf16": {"enabled": matches!(setup.precision, Precision::Bf16Mixed | Precision::Bf16)},
        "fp16": if fp16 { json!({"enabled": true, "loss_scale": 0, "initial_scale_power": 16}) } else { json!({"enabled": false}) },
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    });
    if setup.offload != Offload::None {
        if matches!(setup.optimizer, Optimizer::Adamw | Optimizer::AdamwFused) {
            // DeepSpeed refuses a client optimizer with offload; its CPU AdamW is the fast path.
            // "auto" lets the Hugging Face Trainer fill in its own learning rate and betas.
            config["optimizer"] = json!({
                "type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
            });
        } else {
            config["zero_force_ds_cpu_optimizer"] = json!(false);
        }
    }
    config
}
