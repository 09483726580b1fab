//! Transformer families: the layout facts a config.json does not spell out (how many norms a
//! block has, which projections are fused, which GELU the MLP runs), one place per family. Each
//! was read off the family's Hugging Face modelling code (docs/planner.md lists them).

/// A family of Hugging Face transformer models, by its `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    Gpt2,
    Bert,
    Roberta,
    #[default]
    Llama,
    Mistral,
    Qwen2,
    /// Qwen3: an RMSNorm on each head's queries and keys.
    Qwen3,
    Gemma,
    /// Gemma 2: norms before and after attention and the MLP.
    Gemma2,
    /// Gemma 3 (its text model): Gemma 2's four norms plus query and key norms.
    Gemma3,
    /// Phi-1/1.5/2: attention and MLP side by side after one LayerNorm, GELU MLP, biases.
    Phi,
    /// Phi-3: Llama-like with fused q/k/v and gate/up projections.
    Phi3,
    /// GPT-NeoX / Pythia: parallel attention and MLP, fused q/k/v, LayerNorms with biases.
    GptNeox,
}

/// How a block's MLP computes its GELU, which decides what it keeps for the backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluKind {
    /// One fused op (`F.gelu`, also with `approximate="tanh"`): keeps its input.
    Fused,
    /// Hugging Face's `NewGELUActivation` (`gelu_new`), written out in Python ops: the cube,
    /// the scaled sum, the tanh and the products each keep a tensor of the MLP's width.
    PythonTanh,
}

/// Every family, with the `model_type` names a config.json uses for it.
pub const FAMILY_TYPES: [(&str, Family); 13] = [
    ("gpt2", Family::Gpt2),
    ("bert", Family::Bert),
    ("roberta", Family::Roberta),
    ("llama", Family::Llama),
    ("mistral", Family::Mistral),
    ("qwen2", Family::Qwen2),
    ("qwen3", Family::Qwen3),
    ("gemma", Family::Gemma),
    ("gemma2", Family::Gemma2),
    ("gemma3_text", Family::Gemma3),
    ("phi", Family::Phi),
    ("phi3", Family::Phi3),
    ("gpt_neox", Family::GptNeox),
];

impl Family {
    /// The family a config.json's `model_type` names.
    pub fn from_model_type(model_type: &str) -> Option<Family> {
        FAMILY_TYPES
            .iter()
            .find(|(name, _)| *name == model_type)
            .map(|&(_, family)| family)
    }

    /// The `model_type` a config.json of this family has.
    pub fn model_type(self) -> &'static str {
        FAMILY_TYPES
            .iter()
            .find(|(_, family)| *family == self)
            .map_or("llama", |(name, _)| name)
    }

    /// The model types gputune reads, for messages.
    pub fn supported_list() -> String {
        FAMILY_TYPES
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Norm layers per block: one shared by the parallel attention and MLP (Phi), pre- and
    /// post-norms around both (Gemma 2/3), or one before each (the rest).
    pub fn norms_per_block(self) -> u64 {
        match self {
            Family::Phi => 1,
            Family::Gemma2 | Family::Gemma3 => 4,
            _ => 2,
        }
    }

    /// Whether queries and keys get a per-head RMSNorm (one head_dim weight each).
    pub fn query_key_norms(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Gemma3)
    }

    /// Whether attention and MLP read the same block input side by side.
    pub fn parallel_block(self) -> bool {
        matches!(self, Family::Phi | Family::GptNeox)
    }

    /// Whether q, k and v come from one fused linear layer (LoRA adapts it as one matrix).
    pub fn fused_qkv(self) -> bool {
        matches!(self, Family::Gpt2 | Family::Phi3 | Family::GptNeox)
    }

    /// Whether the gated MLP's gate and up projections are one fused linear layer.
    pub fn fused_gate_up(self) -> bool {
        self == Family::Phi3
    }

    /// The GELU the MLP runs (gated MLPs use SiLU or a fused tanh GELU: `Fused`).
    pub fn gelu(self) -> GeluKind {
        match self {
            Family::Gpt2 | Family::Phi => GeluKind::PythonTanh,
            _ => GeluKind::Fused,
        }
    }

    /// Whether attention scores and logits are soft-capped with a tanh (Gemma 2).
    pub fn logit_softcapping(self) -> bool {
        self == Family::Gemma2
    }

    /// Whether the loss upcasts the logits to fp32 (Hugging Face's causal-LM loss does; the
    /// masked-LM heads of BERT and RoBERTa do not).
    pub fn loss_upcast(self) -> bool {
        !matches!(self, Family::Bert | Family::Roberta)
    }

    /// Whether the output head has a bias (Phi's `lm_head`).
    pub fn output_head_bias(self) -> bool {
        self == Family::Phi
    }

    /// Token-type embeddings of an encoder (BERT: 2, RoBERTa: 1).
    pub fn token_types(self) -> u64 {
        match self {
            Family::Bert => 2,
            Family::Roberta => 1,
            _ => 0,
        }
    }

    /// What `tie_word_embeddings` is when a config.json leaves it out: each family's config
    /// class sets its own default.
    pub fn ties_embeddings_by_default(self) -> bool {
        matches!(
            self,
            Family::Gpt2
                | Family::Bert
                | Family::Roberta
                | Family::Gemma
                | Family::Gemma2
                | Family::Gemma3
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_round_trips_through_its_model_type() {
        for (name, family) in FAMILY_TYPES {
            assert_eq!(Family::from_model_type(name), Some(family));
            assert_eq!(family.model_type(), name);
        }
        assert_eq!(Family::from_model_type("t5"), None);
        assert!(Family::supported_list().contains("gpt_neox"));
    }
}
