//! A DeepSpeed config JSON; unsharded setups get ZeRO stage 0.

use serde_json::{Value, json};

use super::zero_stage;
use gputune_formats::reports::plan_setup::{Offload, Optimizer, Precision, TrainingSetup};

/// Whether the config names the optimizer itself (DeepSpeed has AdamW, not the others).
pub(super) fn ds_optimizer(optimizer: Optimizer) -> bool {
    matches!(optimizer, Optimizer::Adamw | Optimizer::AdamwFused)
}

/// A DeepSpeed config; unsharded setups get ZeRO stage 0.
pub(super) fn deepspeed(setup: &TrainingSetup, grad_accum_steps: u64) -> Value {
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
    if ds_optimizer(setup.optimizer) {
        // DeepSpeed's own AdamW (fused on the GPU, its CPU AdamW with offload): no model-wide
        // temporary, as the plan counts for fused AdamW and at most what it counts for foreach.
        // "auto" lets the Hugging Face Trainer or accelerate fill in the learning rate and betas.
        config["optimizer"] = json!({
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        });
    } else {
        // The plan's optimizer is none of DeepSpeed's: the script passes it, and ZeRO refuses
        // an optimizer it has not tested unless told.
        if stage > 0 {
            config["zero_allow_untested_optimizer"] = json!(true);
        }
        if setup.offload != Offload::None {
            config["zero_force_ds_cpu_optimizer"] = json!(false);
        }
    }
    config
}
