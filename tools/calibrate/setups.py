"""The measured setups: small models of each family, built from configs with random weights.

Sizes are chosen so one step takes seconds on two CPU cores, while keeping each family's
layout (grouped-query heads, a head_dim that is not hidden/heads, tied or untied embeddings,
fused projections, parallel blocks, q/k norms, sliding windows, partial rotary).
"""

from dataclasses import dataclass, field

import transformers as T

# model id -> (config class, model class, family-specific config fields). Every config
# also gets attn_implementation and, for families that have it, its dropout fields.
MODELS = {
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, dict(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048,
        tie_word_embeddings=False)),
    "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(
        hidden_size=384, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, vocab_size=32768, max_position_embeddings=4096,
        sliding_window=4096, tie_word_embeddings=False)),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, dict(
        hidden_size=448, intermediate_size=1216, num_hidden_layers=3, num_attention_heads=7,
        num_key_value_heads=1, vocab_size=30000, max_position_embeddings=4096,
        tie_word_embeddings=True)),
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, dict(
        hidden_size=384, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, vocab_size=30000, max_position_embeddings=4096,
        tie_word_embeddings=True)),
    "gemma": (T.GemmaConfig, T.GemmaForCausalLM, dict(
        hidden_size=512, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=128, vocab_size=32000, max_position_embeddings=2048,
        hidden_activation="gelu_pytorch_tanh")),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, dict(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=96, vocab_size=32000, max_position_embeddings=2048,
        sliding_window=128, query_pre_attn_scalar=96)),
    "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, dict(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=128, vocab_size=32000, max_position_embeddings=2048,
        sliding_window=128, query_pre_attn_scalar=128,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"])),
    "phi2": (T.PhiConfig, T.PhiForCausalLM, dict(
        hidden_size=640, intermediate_size=2560, num_hidden_layers=2, num_attention_heads=8,
        vocab_size=32000, max_position_embeddings=2048, partial_rotary_factor=0.4,
        tie_word_embeddings=False)),
    "phi3": (T.Phi3Config, T.Phi3ForCausalLM, dict(
        hidden_size=384, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=6, vocab_size=32064, max_position_embeddings=4096,
        original_max_position_embeddings=4096, tie_word_embeddings=False)),
    "gpt-neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM, dict(
        hidden_size=512, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=8,
        vocab_size=30000, max_position_embeddings=2048, rotary_pct=0.25,
        use_parallel_residual=True, tie_word_embeddings=False)),
    "gpt2": (T.GPT2Config, T.GPT2LMHeadModel, dict(
        n_embd=384, n_layer=3, n_head=6, vocab_size=50257, n_positions=1024)),
    "bert": (T.BertConfig, T.BertForMaskedLM, dict(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=3, num_attention_heads=6,
        vocab_size=30522, max_position_embeddings=512)),
    "roberta": (T.RobertaConfig, T.RobertaForMaskedLM, dict(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=3, num_attention_heads=6,
        vocab_size=50265, max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, type_vocab_size=1)),
    "t5": (T.T5Config, T.T5ForConditionalGeneration, dict(
        d_model=256, d_kv=32, d_ff=1024, num_layers=2, num_decoder_layers=2, num_heads=8,
        vocab_size=32128, feed_forward_proj="relu", tie_word_embeddings=True,
        decoder_start_token_id=0, pad_token_id=0)),
    "vit": (T.ViTConfig, T.ViTForImageClassification, dict(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=3, num_attention_heads=6,
        image_size=224, patch_size=16, num_labels=100)),
    "resnet50": None,  # torchvision.models.resnet50, no config.json
}

# The dropout fields each family's config has, and their library defaults (as run when
# `dropout` is true). Families without dropout fields train without dropout.
DROPOUT_FIELDS = {
    "gpt2": dict(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1),
    "bert": dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "roberta": dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "t5": dict(dropout_rate=0.1),
    "vit": dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
}

TASKS = {"bert": "lm", "roberta": "lm", "vit": "classification", "resnet50": "classification"}

# LoRA target modules: attention projections and every linear layer of a block, by the
# modules' real names (fused projections: GPT-2 c_attn, Phi-3 qkv_proj, GPT-NeoX
# query_key_value).
LORA_TARGETS = {
    "llama": (["q_proj", "k_proj", "v_proj", "o_proj"],
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "qwen2": (["q_proj", "k_proj", "v_proj", "o_proj"],
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "qwen3": (["q_proj", "k_proj", "v_proj", "o_proj"],
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "gemma": (["q_proj", "k_proj", "v_proj", "o_proj"],
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "phi2": (["q_proj", "k_proj", "v_proj", "dense"],
             ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"]),
    "phi3": (["qkv_proj", "o_proj"], ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "gpt-neox": (["query_key_value", "dense"],
                 ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]),
    # "attn.c_proj": a bare "c_proj" would also match the MLP's output projection.
    "gpt2": (["c_attn", "attn.c_proj"], ["c_attn", "c_proj", "c_fc"]),
}


@dataclass
class Setup:
    id: str
    model: str
    method: str = "full"  # full | lora
    precision: str = "fp32"  # fp32 | bf16-mixed | bf16
    optimizer: str = "adamw"  # adamw | sgd
    batch: int = 2
    seq_len: int = 256  # tokens, or the image side for vision models
    checkpointing: str = "none"  # none | full
    attention: str = "sdpa"  # sdpa | eager
    dropout: bool = False
    lora_rank: int = 0
    lora_targets: str = ""  # attention | all-linear
    # The configs' default: Hugging Face models then fill a DynamicCache during the training
    # forward too. Gradient checkpointing turns it off (the library does so itself).
    use_cache: bool = True
    notes: list = field(default_factory=list)

    def __post_init__(self):
        if self.checkpointing != "none":
            self.use_cache = False

    @property
    def task(self):
        return TASKS.get(self.model, "lm")

    @property
    def lora_modules(self):
        if self.method != "lora":
            return []
        attention, everything = LORA_TARGETS[self.model]
        return attention if self.lora_targets == "attention" else everything


def lora(rank, targets, **kwargs):
    return dict(method="lora", lora_rank=rank, lora_targets=targets, **kwargs)


SETUPS = [
    # Llama: every variation on one model.
    Setup("llama-full-fp32", "llama"),
    Setup("llama-full-bf16-mixed", "llama", precision="bf16-mixed"),
    Setup("llama-full-bf16", "llama", precision="bf16"),
    Setup("llama-full-bf16-mixed-eager", "llama", precision="bf16-mixed", attention="eager"),
    Setup("llama-full-bf16-mixed-checkpointed", "llama", precision="bf16-mixed",
          checkpointing="full", batch=4),
    Setup("llama-full-fp32-sgd", "llama", optimizer="sgd"),
    Setup("llama-full-bf16-mixed-no-cache", "llama", precision="bf16-mixed", use_cache=False),
    Setup("llama-lora-attention-r8-bf16-mixed", "llama", precision="bf16-mixed",
          **lora(8, "attention")),
    Setup("llama-lora-all-r16-bf16-checkpointed", "llama", precision="bf16",
          checkpointing="full", **lora(16, "all-linear")),
    Setup("mistral-full-bf16-mixed", "mistral", precision="bf16-mixed", seq_len=512, batch=1),
    Setup("qwen2-full-bf16-mixed", "qwen2", precision="bf16-mixed"),
    Setup("qwen2-lora-all-r16-bf16-mixed", "qwen2", precision="bf16-mixed",
          **lora(16, "all-linear")),
    Setup("qwen3-full-bf16", "qwen3", precision="bf16", batch=4, seq_len=128),
    Setup("qwen3-lora-attention-r8-fp32", "qwen3", **lora(8, "attention")),
    Setup("gemma-full-bf16-mixed", "gemma", precision="bf16-mixed"),
    Setup("gemma-lora-all-r8-bf16-mixed-checkpointed", "gemma", precision="bf16-mixed",
          checkpointing="full", **lora(8, "all-linear")),
    Setup("gemma2-full-bf16-mixed-eager", "gemma2", precision="bf16-mixed", attention="eager"),
    Setup("gemma3-full-bf16", "gemma3", precision="bf16"),
    Setup("phi2-full-bf16-mixed", "phi2", precision="bf16-mixed"),
    Setup("phi2-lora-attention-r16-bf16", "phi2", precision="bf16", **lora(16, "attention")),
    Setup("phi3-full-bf16-mixed", "phi3", precision="bf16-mixed"),
    Setup("phi3-full-bf16-mixed-no-cache", "phi3", precision="bf16-mixed", use_cache=False),
    Setup("phi3-lora-all-r8-bf16-mixed-checkpointed", "phi3", precision="bf16-mixed",
          checkpointing="full", **lora(8, "all-linear")),
    Setup("gpt-neox-full-fp32", "gpt-neox"),
    Setup("gpt-neox-lora-attention-r8-bf16-mixed", "gpt-neox", precision="bf16-mixed",
          **lora(8, "attention")),
    Setup("gpt2-full-fp32-eager", "gpt2", attention="eager", dropout=True),
    Setup("gpt2-full-bf16-mixed", "gpt2", precision="bf16-mixed", dropout=True),
    Setup("gpt2-full-fp32", "gpt2"),
    Setup("gpt2-full-fp32-no-cache", "gpt2", use_cache=False),
    Setup("gpt2-lora-attention-r8-bf16-mixed-checkpointed", "gpt2", precision="bf16-mixed",
          checkpointing="full", dropout=True, **lora(8, "attention")),
    Setup("bert-mlm-full-fp32", "bert", dropout=True),
    Setup("bert-mlm-full-bf16-mixed-eager", "bert", precision="bf16-mixed", attention="eager",
          dropout=True),
    Setup("roberta-mlm-full-bf16-mixed", "roberta", precision="bf16-mixed", dropout=True),
    Setup("t5-full-fp32", "t5", seq_len=128, dropout=True, attention="eager"),
    Setup("vit-full-fp32", "vit", seq_len=224, batch=4),
    Setup("vit-full-bf16-mixed-eager", "vit", seq_len=224, batch=4, precision="bf16-mixed",
          attention="eager"),
    Setup("resnet50-full-fp32", "resnet50", seq_len=128, batch=4),
    Setup("resnet50-full-bf16-mixed-sgd", "resnet50", seq_len=128, batch=4,
          precision="bf16-mixed", optimizer="sgd"),
]
