//! The trainer configs `gputune plan --export` writes (and the Plan tab's export), pinned byte
//! for byte: the formats are the tools' own (Hugging Face `TrainingArguments`, `accelerate
//! config`, DeepSpeed), and a script or a trainer reads the files gputune wrote.

use gputune_core::plan::export::{ExportFormat, export_with_notes};
use gputune_core::plan::model::preset;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Checkpointing, Method, Offload, Optimizer, Sharding, TrainingSetup,
};

use super::golden;

/// Each format for a QLoRA fine-tune of Llama 2 7B on two GPUs, and for a LoRA one on one GPU.
#[test]
fn plan_exports_write_their_bytes() {
    let Some(model) = preset("llama-2-7b") else {
        panic!("llama-2-7b is a preset");
    };
    let lora = TrainingSetup {
        method: Method::Lora {
            rank: 16,
            targets: LoraTargets::Attention,
        },
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(4, 2048)
    };
    let qlora_sharded = TrainingSetup {
        method: Method::Qlora {
            rank: 64,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        optimizer: Optimizer::AdamwFused,
        gpus: 2,
        sharding: Sharding::Zero3,
        offload: Offload::None,
        chunked_cross_entropy: true,
        ..TrainingSetup::new(2, 4096)
    };
    for (name, setup, steps) in [("lora", lora, 8), ("qlora-zero3", qlora_sharded, 4)] {
        for format in ExportFormat::ALL {
            // The notes go to the terminal, not into the file.
            let export = match export_with_notes(&model, &setup, steps, format) {
                Ok(export) => export,
                Err(error) => panic!("{name} as {}: {error}", format.name()),
            };
            golden(
                &format!("exports/{name}-{}", format.file_name()),
                export.text.as_bytes(),
            );
        }
    }
}
