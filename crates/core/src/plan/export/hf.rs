//! Hugging Face: `TrainingArguments` as JSON, only its own fields, so
//! `TrainingArguments(output_dir=..., **json.load(file))` takes it as it is; and the settings
//! that belong to loading the model (PEFT, bitsandbytes, attention, dtype), which
//! `TrainingArguments` has no field for.

use serde_json::{Map, Value, json};

use super::{is_zero, lora_target_modules};
use crate::plan::model::{Architecture, Model};
use gputune_formats::reports::plan_setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Precision, Sharding, Task, TrainingSetup,
};

/// The `optim` name of an optimizer.
pub(super) fn optim_name(optimizer: Optimizer) -> &'static str {
    match optimizer {
        Optimizer::Adamw => "adamw_torch",
        Optimizer::AdamwFused => "adamw_torch_fused",
        Optimizer::Adamw8bit => "adamw_bnb_8bit",
        Optimizer::PagedAdamw8bit => "paged_adamw_8bit",
        Optimizer::Adafactor => "adafactor",
        Optimizer::Sgd | Optimizer::SgdMomentum => "sgd",
    }
}

/// Whether the Hugging Face Trainer computes the loss without the whole fp32 logits: Liger's
/// fused linear cross-entropy (`use_liger_kernel`), for language models.
pub(super) fn liger_loss(model: &Model, setup: &TrainingSetup) -> bool {
    setup.chunked_cross_entropy
        && setup.task == Task::LanguageModel
        && matches!(model.architecture, Architecture::Transformer(_))
}

/// `TrainingArguments` fields, and nothing else.
pub(super) fn training_arguments(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
) -> Value {
    let fsdp = setup.sharding == Sharding::Fsdp;
    let checkpointing = setup.checkpointing == Checkpointing::Full;
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
    if checkpointing && !fsdp && setup.activation_offload {
        // Trainer takes `offload` out of these and keeps the checkpointed blocks' inputs in
        // pinned CPU memory (transformers 5).
        args.insert(
            "gradient_checkpointing_kwargs".into(),
            json!({"offload": true}),
        );
    }
    if liger_loss(model, setup) {
        args.insert("use_liger_kernel".into(), json!(true));
    }
    args.insert("optim".into(), json!(optim_name(setup.optimizer)));
    if fsdp {
        let wrap = if setup.offload == Offload::OptimizerAndParams {
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
    }
    Value::Object(args)
}

/// What belongs to loading the model rather than to `TrainingArguments`: the attention
/// implementation, the dtype for pure bf16, PEFT's `LoraConfig` and bitsandbytes'
/// `BitsAndBytesConfig`, as keyword arguments.
pub fn model_load_settings(model: &Model, setup: &TrainingSetup) -> Value {
    let mut load = Map::new();
    load.insert("model".into(), json!(model.name));
    if matches!(
        model.architecture,
        Architecture::Transformer(_) | Architecture::Vit(_)
    ) {
        let attention = match setup.attention {
            Attention::Eager => "eager",
            Attention::Sdpa => "sdpa",
            Attention::Flash => "flash_attention_2",
        };
        load.insert("attn_implementation".into(), json!(attention));
    }
    // Pure bf16 loads the model in bf16; LoRA and QLoRA load the frozen model in the compute
    // type (PEFT keeps the adapters in fp32), as the plan counts them.
    let adapters = !matches!(setup.method, Method::Full);
    match setup.precision {
        Precision::Bf16 => {
            load.insert("dtype".into(), json!("bfloat16"));
        }
        Precision::Bf16Mixed if adapters => {
            load.insert("dtype".into(), json!("bfloat16"));
        }
        Precision::Fp16Mixed if adapters => {
            load.insert("dtype".into(), json!("float16"));
        }
        _ => {}
    }
    if let Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } = setup.method {
        load.insert(
            "lora_config".into(),
            json!({"r": rank, "lora_alpha": 2 * rank, "target_modules": lora_target_modules(model, targets)}),
        );
    }
    if let Method::Qlora {
        double_quantization,
        ..
    } = setup.method
    {
        let dtype = if setup.precision == Precision::Fp16Mixed {
            "float16"
        } else {
            "bfloat16"
        };
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
        load.insert("quantization_config".into(), bnb);
    }
    Value::Object(load)
}

/// How to load the model the way the plan counts it: `from_pretrained`'s arguments and PEFT.
pub(super) fn model_load_notes(model: &Model, setup: &TrainingSetup) -> Vec<String> {
    let mut notes = Vec::new();
    let load = model_load_settings(model, setup);
    let mut load_arguments = Vec::new();
    if let Some(attention) = load.get("attn_implementation") {
        load_arguments.push(format!("attn_implementation={}", python_literal(attention)));
    }
    if let Some(dtype) = load.get("dtype").and_then(Value::as_str) {
        load_arguments.push(format!("dtype=torch.{dtype}"));
    }
    if let Some(bnb) = load.get("quantization_config") {
        load_arguments.push(format!(
            "quantization_config={}",
            python_call("BitsAndBytesConfig", bnb)
        ));
    }
    if !load_arguments.is_empty() && !matches!(model.architecture, Architecture::Cnn(_)) {
        notes.push(format!(
            "Load the model with from_pretrained(..., {}).",
            load_arguments.join(", ")
        ));
    }
    if let Some(lora) = load.get("lora_config") {
        notes.push(format!(
            "Wrap it with get_peft_model(model, {}).",
            python_call("LoraConfig", lora)
        ));
    }
    notes
}

/// What the Trainer needs beyond the JSON.
pub(super) fn trainer_notes(model: &Model, setup: &TrainingSetup) -> Vec<String> {
    let mut notes = Vec::new();
    if setup.precision == Precision::Bf16 {
        notes.push("Pure bf16: bf16=true alone trains with fp32 weights; loading the model in bfloat16 makes weights, gradients and optimizer states bf16.".to_string());
    }
    if setup.optimizer == Optimizer::SgdMomentum {
        notes.push("SGD with momentum: \"sgd\" has none, so pass torch.optim.SGD(model.parameters(), lr=..., momentum=0.9) as Trainer(optimizers=(optimizer, None)).".to_string());
    }
    if liger_loss(model, setup) {
        notes.push("use_liger_kernel computes the loss without the whole fp32 logits (Liger's fused linear cross-entropy): pip install liger-kernel.".to_string());
    }
    if setup.activation_offload {
        let checkpointing = setup.checkpointing == Checkpointing::Full;
        notes.push(if checkpointing && setup.sharding != Sharding::Fsdp {
            "Activation offloading: gradient_checkpointing_kwargs {\"offload\": true} keeps each checkpointed block's input in pinned CPU memory (transformers 5 or later).".to_string()
        } else {
            "Activation offloading is no Trainer option here (it offloads only with gradient checkpointing, without FSDP): torchtune's enable_activation_offloading does it.".to_string()
        });
    }
    if is_zero(setup.sharding) {
        notes.push(
            "Save gputune's DeepSpeed export as ds_config.json next to the training script."
                .to_string(),
        );
    }
    notes
}

/// A call with a JSON object's entries as keyword arguments: `LoraConfig(r=16, ...)`.
fn python_call(name: &str, arguments: &Value) -> String {
    let arguments = match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}={}", python_literal(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => python_literal(other),
    };
    format!("{name}({arguments})")
}

/// A JSON value as a Python literal: `{"r": 16, "x": true}` → `{'r': 16, 'x': True}`.
fn python_literal(value: &Value) -> String {
    match value {
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Null => "None".to_string(),
        Value::String(text) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(python_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(key, item)| format!("'{key}': {}", python_literal(item)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Number(number) => number.to_string(),
    }
}
