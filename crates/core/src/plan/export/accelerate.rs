//! An `accelerate config` YAML file, written by hand (flat keys and one level of blocks); what
//! the file cannot set goes in its comments.

use super::{is_zero, zero_stage};
use crate::plan::model::{Architecture, Model};
use gputune_formats::reports::plan_setup::{
    Checkpointing, Offload, Precision, Sharding, TrainingSetup,
};

/// An `accelerate config` file, written by hand (flat keys and one level of blocks).
pub(super) fn accelerate(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    notes: &[String],
) -> String {
    let fsdp = setup.sharding == Sharding::Fsdp;
    let zero = is_zero(setup.sharding);
    let checkpointing = setup.checkpointing == Checkpointing::Full;
    let cpu_or_none = |offloaded: bool| if offloaded { "cpu" } else { "none" };
    let mut lines = vec![
        format!(
            "# accelerate config for {} from gputune's plan.",
            one_line(&model.name)
        ),
        "# Run: accelerate launch --config_file accelerate_config.yaml train.py".to_string(),
    ];
    if setup.precision == Precision::Bf16 {
        lines.push("# Pure bf16: load the model in bfloat16 (dtype=torch.bfloat16); mixed_precision alone keeps fp32 weights.".into());
    }
    if zero && setup.offload != Offload::None {
        lines.push("# CPU offload runs the optimizer step on the CPU: DeepSpeed's CPU AdamW is fastest (the deepspeed export sets it).".into());
    }
    lines.extend(notes.iter().map(|note| format!("# {}", one_line(note))));
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

/// Text on one comment line: line breaks and other control characters become spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
