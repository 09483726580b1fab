//! A training setup as `gputune plan` takes it and `plan --json` prints it (`yours.setup`,
//! `recommended.setup`): method, precision, optimizer, batch, parallelism and overheads. Each
//! closed set's `name()` is the command line's (`--precision bf16-mixed`); its JSON value is
//! the snake_case form (`"bf16_mixed"`), and the command line's name reads too. Unlike the
//! reports, a setup also reads (`Deserialize`): the planner's measurement tables
//! (tests/data/planner_*.toml) name their precision, optimizer, sharding, ... with these.

use serde::{Deserialize, Serialize};

/// Which linear layers LoRA adapts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoraTargets {
    /// Query, key, value and output projections.
    #[default]
    Attention,
    /// Every linear layer of every block (attention and MLP).
    #[serde(alias = "all-linear")]
    AllLinear,
}

impl LoraTargets {
    pub const ALL: [LoraTargets; 2] = [LoraTargets::Attention, LoraTargets::AllLinear];

    pub fn name(self) -> &'static str {
        match self {
            LoraTargets::Attention => "attention",
            LoraTargets::AllLinear => "all-linear",
        }
    }
}

/// What is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Method {
    /// Every parameter.
    Full,
    /// Low-rank adapters on frozen 16-bit (or fp32) weights.
    Lora { rank: u64, targets: LoraTargets },
    /// Low-rank adapters on frozen 4-bit NF4 weights, 16-bit compute.
    Qlora {
        rank: u64,
        targets: LoraTargets,
        double_quantization: bool,
    },
}

impl Method {
    pub fn name(&self) -> &'static str {
        match self {
            Method::Full => "full",
            Method::Lora { .. } => "lora",
            Method::Qlora { .. } => "qlora",
        }
    }
}

/// Number formats for weights, gradients and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Everything in 32-bit floats.
    Fp32,
    /// fp32 master weights, fp16 compute, dynamic loss scaling (PyTorch AMP).
    #[serde(alias = "fp16-mixed")]
    Fp16Mixed,
    /// fp32 master weights, bf16 compute (PyTorch AMP).
    #[serde(alias = "bf16-mixed")]
    Bf16Mixed,
    /// Weights, gradients and optimizer states in bf16 ("pure bf16").
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 4] = [
        Precision::Fp32,
        Precision::Fp16Mixed,
        Precision::Bf16Mixed,
        Precision::Bf16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16Mixed => "fp16-mixed",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Bf16 => "bf16",
        }
    }
}

/// The optimizer and how much state it keeps per trained parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// PyTorch's AdamW as it runs by default on a GPU (`foreach`): its step allocates a
    /// temporary the size of one state.
    Adamw,
    /// AdamW with a fused kernel (`fused=True`; the Hugging Face Trainer's default
    /// `adamw_torch_fused`) or a per-parameter loop: no model-wide temporary.
    #[serde(alias = "adamw-fused")]
    AdamwFused,
    #[serde(rename = "adamw_8bit", alias = "adamw-8bit")]
    Adamw8bit,
    #[serde(rename = "paged_adamw_8bit", alias = "paged-adamw-8bit")]
    PagedAdamw8bit,
    Adafactor,
    Sgd,
    #[serde(alias = "sgd-momentum")]
    SgdMomentum,
}

impl Optimizer {
    pub const ALL: [Optimizer; 7] = [
        Optimizer::Adamw,
        Optimizer::AdamwFused,
        Optimizer::Adamw8bit,
        Optimizer::PagedAdamw8bit,
        Optimizer::Adafactor,
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::AdamwFused => "adamw-fused",
            Optimizer::Adamw8bit => "adamw-8bit",
            Optimizer::PagedAdamw8bit => "paged-adamw-8bit",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
        }
    }
}

/// Activation (gradient) checkpointing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpointing {
    #[default]
    None,
    /// Keep only each block's input; recompute the block in the backward pass.
    Full,
}

impl Checkpointing {
    pub const ALL: [Checkpointing; 2] = [Checkpointing::None, Checkpointing::Full];

    pub fn name(self) -> &'static str {
        match self {
            Checkpointing::None => "none",
            Checkpointing::Full => "full",
        }
    }
}

/// How attention is computed: eager keeps the seq × seq score matrix, SDPA and flash do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    Eager,
    #[default]
    Sdpa,
    Flash,
}

impl Attention {
    pub const ALL: [Attention; 3] = [Attention::Eager, Attention::Sdpa, Attention::Flash];

    pub fn name(self) -> &'static str {
        match self {
            Attention::Eager => "eager",
            Attention::Sdpa => "sdpa",
            Attention::Flash => "flash",
        }
    }
}

/// Data parallelism and sharding across GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharding {
    #[default]
    None,
    Ddp,
    /// FSDP full shard: parameters, gradients and optimizer states split across GPUs.
    Fsdp,
    /// ZeRO stage 1: optimizer states split.
    Zero1,
    /// ZeRO stage 2: optimizer states and gradients split.
    Zero2,
    /// ZeRO stage 3: like FSDP full shard.
    Zero3,
}

impl Sharding {
    pub const ALL: [Sharding; 6] = [
        Sharding::None,
        Sharding::Ddp,
        Sharding::Fsdp,
        Sharding::Zero1,
        Sharding::Zero2,
        Sharding::Zero3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Sharding::None => "none",
            Sharding::Ddp => "ddp",
            Sharding::Fsdp => "fsdp",
            Sharding::Zero1 => "zero1",
            Sharding::Zero2 => "zero2",
            Sharding::Zero3 => "zero3",
        }
    }
}

/// What lives in CPU memory instead of on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offload {
    #[default]
    None,
    Optimizer,
    #[serde(alias = "optimizer+params")]
    OptimizerAndParams,
}

impl Offload {
    pub const ALL: [Offload; 3] = [
        Offload::None,
        Offload::Optimizer,
        Offload::OptimizerAndParams,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Offload::None => "none",
            Offload::Optimizer => "optimizer",
            Offload::OptimizerAndParams => "optimizer+params",
        }
    }
}

/// What the model is trained to output: a language model's logits cover the whole vocabulary at
/// every position, a classifier's a few classes per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Causal or masked language modelling (the default for text models).
    #[default]
    #[serde(alias = "lm")]
    LanguageModel,
    /// Sequence or image classification.
    Classification,
}

impl Task {
    pub const ALL: [Task; 2] = [Task::LanguageModel, Task::Classification];

    pub fn name(self) -> &'static str {
        match self {
            Task::LanguageModel => "lm",
            Task::Classification => "classification",
        }
    }
}

/// PyTorch's CUDA caching allocator, as `PYTORCH_CUDA_ALLOC_CONF` sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Allocator {
    /// Fixed-size segments: blocks freed within a step are cached and split for smaller
    /// requests, so a later larger request takes a new segment.
    #[default]
    Default,
    /// `expandable_segments:True`: one segment per stream that grows page by page; only holes
    /// smaller than a later request stay unused.
    #[serde(alias = "expandable-segments")]
    ExpandableSegments,
}

impl Allocator {
    pub const ALL: [Allocator; 2] = [Allocator::Default, Allocator::ExpandableSegments];

    pub fn name(self) -> &'static str {
        match self {
            Allocator::Default => "default",
            Allocator::ExpandableSegments => "expandable-segments",
        }
    }

    /// The environment variable a training job needs to use this allocator, if any.
    pub fn env(self) -> Option<(&'static str, &'static str)> {
        match self {
            Allocator::Default => None,
            Allocator::ExpandableSegments => {
                Some(("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
            }
        }
    }
}

/// Memory the framework takes beyond the training state: the CUDA context (kernels, cuBLAS
/// workspaces) and what the caching allocator reserves on top of what tensors use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Overheads {
    /// What the process holds outside PyTorch's allocator: the CUDA context and the kernels
    /// loaded as the step runs. It differs per card, driver and CUDA version.
    pub cuda_context_bytes: u64,
    #[serde(default)]
    pub allocator: Allocator,
    /// Replaces the measured allocator model: the reserve beyond the live tensors at the peak
    /// as a fraction of them (`--allocator-reserve-pct`).
    #[serde(default)]
    pub allocator_reserve_fraction: Option<f64>,
}

/// The CUDA context assumed when none is given: measured on an NVIDIA H200 (driver 580, CUDA
/// 13, PyTorch 2.11) as the training process's memory in NVML beyond PyTorch's reserve after
/// real training steps (758-770 MiB over 10 setups; 676 MiB right after the first cuBLAS call,
/// before the step's kernels are loaded). Other cards and drivers differ by a few hundred MiB.
pub const DEFAULT_CUDA_CONTEXT_MIB: u64 = 762;

impl Default for Overheads {
    fn default() -> Overheads {
        Overheads {
            cuda_context_bytes: DEFAULT_CUDA_CONTEXT_MIB * 1024 * 1024,
            allocator: Allocator::Default,
            allocator_reserve_fraction: None,
        }
    }
}

fn one() -> u64 {
    1
}

/// One training configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainingSetup {
    pub method: Method,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub micro_batch: u64,
    /// Micro-batches whose gradients add up before each optimizer step. Above 1, the gradients
    /// of the earlier micro-batches are held through the next forward and backward passes.
    #[serde(default = "one")]
    pub gradient_accumulation_steps: u64,
    /// Tokens per sample for text models; the image side in pixels for vision models.
    pub sequence_length: u64,
    pub checkpointing: Checkpointing,
    pub attention: Attention,
    pub gpus: u64,
    pub sharding: Sharding,
    pub offload: Offload,
    pub task: Task,
    /// Saved activations wait in pinned CPU memory between the forward and the backward pass
    /// (torchtune's `enable_activation_offloading`): only the block being computed keeps its
    /// activations on the GPU.
    #[serde(default)]
    pub activation_offload: bool,
    /// The loss is computed over chunks of the sequence (torchtune's chunked cross-entropy):
    /// the fp32 upcast of the logits exists for one chunk at a time.
    #[serde(default)]
    pub chunked_cross_entropy: bool,
    pub overheads: Overheads,
}

impl TrainingSetup {
    /// A plain single-GPU bf16 full fine-tune with AdamW.
    pub fn new(micro_batch: u64, sequence_length: u64) -> TrainingSetup {
        TrainingSetup {
            method: Method::Full,
            precision: Precision::Bf16Mixed,
            optimizer: Optimizer::Adamw,
            micro_batch,
            gradient_accumulation_steps: 1,
            sequence_length,
            checkpointing: Checkpointing::None,
            attention: Attention::Sdpa,
            gpus: 1,
            sharding: Sharding::None,
            offload: Offload::None,
            task: Task::LanguageModel,
            activation_offload: false,
            chunked_cross_entropy: false,
            overheads: Overheads::default(),
        }
    }

    /// GPUs the training state is split across (1 when nothing is sharded).
    pub fn shards(&self) -> u64 {
        match self.sharding {
            Sharding::None | Sharding::Ddp => 1,
            _ => self.gpus.max(1),
        }
    }
}
