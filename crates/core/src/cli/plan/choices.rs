//! The planner's closed sets on the command line (`--precision bf16-mixed`): their names are
//! the types' own `name()`s (formats::reports::plan_setup), their help is the command's; the
//! one parser is `cli::choices`.

use crate::cli::choices::Choice;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Allocator, Attention, Checkpointing, Offload, Optimizer, Precision, Sharding, Task,
};

impl Choice for LoraTargets {
    fn all() -> &'static [Self] {
        &LoraTargets::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            LoraTargets::Attention => "Query, key, value and output projections",
            LoraTargets::AllLinear => "Every linear layer of every block (attention and MLP)",
        })
    }
}

impl Choice for Precision {
    fn all() -> &'static [Self] {
        &Precision::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Precision::Fp32 => "Everything in 32-bit floats",
            Precision::Fp16Mixed => {
                "fp32 master weights, fp16 compute, dynamic loss scaling (PyTorch AMP)"
            }
            Precision::Bf16Mixed => "fp32 master weights, bf16 compute (PyTorch AMP)",
            Precision::Bf16 => "Weights, gradients and optimizer states in bf16 (\"pure bf16\")",
        })
    }
}

impl Choice for Optimizer {
    fn all() -> &'static [Self] {
        &Optimizer::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        match self {
            Optimizer::Adamw => Some(
                "PyTorch's AdamW as it runs by default on a GPU (`foreach`): its step allocates a temporary the size of one state",
            ),
            Optimizer::AdamwFused => Some(
                "AdamW with a fused kernel (`fused=True`; the Hugging Face Trainer's default `adamw_torch_fused`) or a per-parameter loop: no model-wide temporary",
            ),
            _ => None,
        }
    }
}

impl Choice for Checkpointing {
    fn all() -> &'static [Self] {
        &Checkpointing::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        match self {
            Checkpointing::None => None,
            Checkpointing::Full => {
                Some("Keep only each block's input; recompute the block in the backward pass")
            }
        }
    }
}

impl Choice for Attention {
    fn all() -> &'static [Self] {
        &Attention::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
}

impl Choice for Sharding {
    fn all() -> &'static [Self] {
        &Sharding::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        match self {
            Sharding::None | Sharding::Ddp => None,
            Sharding::Fsdp => Some(
                "FSDP full shard: parameters, gradients and optimizer states split across GPUs",
            ),
            Sharding::Zero1 => Some("ZeRO stage 1: optimizer states split"),
            Sharding::Zero2 => Some("ZeRO stage 2: optimizer states and gradients split"),
            Sharding::Zero3 => Some("ZeRO stage 3: like FSDP full shard"),
        }
    }
}

impl Choice for Offload {
    fn all() -> &'static [Self] {
        &Offload::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
}

impl Choice for Task {
    fn all() -> &'static [Self] {
        &Task::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Task::LanguageModel => {
                "Causal or masked language modelling (the default for text models)"
            }
            Task::Classification => "Sequence or image classification",
        })
    }
}

impl Choice for Allocator {
    fn all() -> &'static [Self] {
        &Allocator::ALL
    }
    fn cli_name(self) -> &'static str {
        self.name()
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Allocator::Default => {
                "Fixed-size segments: blocks freed within a step are cached and split for smaller requests, so a later larger request takes a new segment"
            }
            Allocator::ExpandableSegments => {
                "`expandable_segments:True`: one segment per stream that grows page by page; only holes smaller than a later request stay unused"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::choices::choice;
    use clap::Parser;
    use clap::builder::TypedValueParser;

    #[derive(Parser)]
    struct Flags {
        #[arg(long, value_parser = choice::<Optimizer>())]
        optimizer: Optimizer,
        #[arg(long, value_parser = choice::<Offload>())]
        offload: Offload,
    }

    /// Every value reads back from its own name.
    fn round_trips<T: Choice + PartialEq + std::fmt::Debug>() {
        for &value in T::all() {
            let parsed = choice::<T>().parse_ref(
                &clap::Command::new("plan"),
                None,
                std::ffi::OsStr::new(value.cli_name()),
            );
            assert_eq!(parsed.ok(), Some(value), "{}", value.cli_name());
        }
    }

    #[test]
    fn every_value_reads_back_from_its_name() {
        round_trips::<LoraTargets>();
        round_trips::<Precision>();
        round_trips::<Optimizer>();
        round_trips::<Checkpointing>();
        round_trips::<Attention>();
        round_trips::<Sharding>();
        round_trips::<Offload>();
        round_trips::<Task>();
        round_trips::<Allocator>();
    }

    #[test]
    fn a_wrong_name_is_refused_with_the_names_allowed() {
        let parsed = Flags::try_parse_from([
            "plan",
            "--optimizer",
            "paged-adamw-8bit",
            "--offload",
            "optimizer+params",
        ]);
        let flags = parsed.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(flags.optimizer, Optimizer::PagedAdamw8bit);
        assert_eq!(flags.offload, Offload::OptimizerAndParams);
        let error =
            match Flags::try_parse_from(["plan", "--optimizer", "adam", "--offload", "none"]) {
                Ok(_) => panic!("adam is not an optimizer name"),
                Err(error) => error.to_string(),
            };
        assert!(error.contains("invalid value 'adam'"), "{error}");
        assert!(error.contains("paged-adamw-8bit"), "{error}");
    }
}
