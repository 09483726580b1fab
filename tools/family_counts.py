"""Parameter and LoRA-adapter counts of real model families, from Hugging Face `transformers`.

Builds each model from its released config on the meta device (no weights, no download),
writes the config as `tests/data/families/<name>.json` (the genuine config.json format the
planner's importer reads) and the counts to `tests/data/families/counts.toml`. The Rust test
`crates/core/tests/planner/plan_families.rs` holds the planner's counts to them exactly.

LoRA counts are PEFT's `r * (in + out)` per adapted module, over the modules each family names
(fused projections are one module). One small config per family is also wrapped with real PEFT
to check that formula against `get_peft_model`.

Run: python tools/family_counts.py   (needs torch, transformers, peft; not run by CI)
"""

import pathlib
import re
import sys

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    BertConfig,
    BertForMaskedLM,
    Gemma2Config,
    Gemma3TextConfig,
    GemmaConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PhiConfig,
    Qwen2Config,
    Qwen3Config,
    RobertaConfig,
    RobertaForMaskedLM,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "families"
RANK = 16

# Released configs (sizes from each model's config.json on the Hugging Face hub).
CONFIGS = {
    "llama-3.2-1b": LlamaConfig(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True, head_dim=64),
    "mistral-nemo-12b": MistralConfig(
        hidden_size=5120, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=131072),
    "qwen2.5-0.5b": Qwen2Config(
        hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-8b": Qwen3Config(
        hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False),
    "qwen3-0.6b": Qwen3Config(
        hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True),
    "gemma-2b": GemmaConfig(
        hidden_size=2048, num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1,
        head_dim=256, intermediate_size=16384, vocab_size=256000),
    "gemma-2-9b": Gemma2Config(
        hidden_size=3584, num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8,
        head_dim=256, intermediate_size=14336, vocab_size=256000),
    "gemma-3-1b": Gemma3TextConfig(
        hidden_size=1152, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
        head_dim=256, intermediate_size=6912, vocab_size=262144),
    "phi-2": PhiConfig(
        hidden_size=2560, num_hidden_layers=32, num_attention_heads=32, intermediate_size=10240,
        vocab_size=51200, partial_rotary_factor=0.4, resid_pdrop=0.1),
    "phi-3-mini": Phi3Config(
        hidden_size=3072, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        intermediate_size=8192, vocab_size=32064),
    "pythia-1b": GPTNeoXConfig(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=8, intermediate_size=8192,
        vocab_size=50304),
    "gpt2": GPT2Config(),
    "bert-base-uncased": BertConfig(),
    "roberta-base": RobertaConfig(
        vocab_size=50265, max_position_embeddings=514, type_vocab_size=1),
}

# Per family: (attention modules, MLP modules) as regexes over a block's module names, the way
# a PEFT user targets them (fused projections are one module each).
TARGETS = {
    "llama": (r"self_attn\.(q|k|v|o)_proj", r"mlp\.(gate|up|down)_proj"),
    "phi": (r"self_attn\.(q_proj|k_proj|v_proj|dense)", r"mlp\.(fc1|fc2)"),
    "phi3": (r"self_attn\.(qkv_proj|o_proj)", r"mlp\.(gate_up_proj|down_proj)"),
    "gpt_neox": (r"attention\.(query_key_value|dense)", r"mlp\.(dense_h_to_4h|dense_4h_to_h)"),
    "gpt2": (r"attn\.(c_attn|c_proj)", r"mlp\.(c_fc|c_proj)"),
    "bert": (r"attention\.(self\.(query|key|value)|output\.dense)",
             r"layer\.\d+\.(intermediate\.dense|output\.dense)"),
}
TARGETS["roberta"] = TARGETS["bert"]
for name in ("mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"):
    TARGETS[name] = TARGETS["llama"]


def build(config):
    with torch.device("meta"):
        if config.model_type == "bert":
            return BertForMaskedLM(config)
        if config.model_type == "roberta":
            return RobertaForMaskedLM(config)
        return AutoModelForCausalLM.from_config(config)


def shape_of(module):
    """(in, out) of a linear layer; GPT-2's Conv1D stores its weight as [in, out]."""
    weight = module.weight
    if type(module).__name__ == "Conv1D":
        return weight.shape[0], weight.shape[1]
    return weight.shape[1], weight.shape[0]


def lora_count(model, patterns):
    pattern = re.compile(r"(^|\.)(" + "|".join(patterns) + r")$")
    total = 0
    for name, module in model.named_modules():
        if hasattr(module, "weight") and module.weight is not None and pattern.search(name):
            if module.weight.dim() == 2:
                inputs, outputs = shape_of(module)
                total += RANK * (inputs + outputs)
    return total


def check_formula_with_peft():
    """The counting formula against real PEFT on small models of the fused families."""
    import peft

    small = {
        "gpt2": GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000),
        "phi3": Phi3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=256, vocab_size=32064),
        "gpt_neox": GPTNeoXConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256, vocab_size=1000),
    }
    for family, config in small.items():
        model = AutoModelForCausalLM.from_config(config)
        attention, mlp = TARGETS[family]
        expected = lora_count(model, [attention, mlp])
        wrapped = peft.get_peft_model(model, peft.LoraConfig(
            r=RANK, target_modules=r".*\.(" + attention + "|" + mlp + r")$"))
        trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
        assert trainable == expected, (family, trainable, expected)
    print("PEFT agrees with r * (in + out) on gpt2, phi3, gpt_neox")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    check_formula_with_peft()
    lines = [
        "# Parameter and LoRA counts from Hugging Face transformers, written by",
        "# tools/family_counts.py (do not edit by hand). Each config is families/<name>.json.",
        f"# torch {torch.__version__}, transformers {transformers.__version__}; LoRA rank {RANK}.",
        "# lora_attention: q/k/v/o (or the fused qkv and output) projections of every block;",
        "# lora_all_linear: those plus the MLP's linear layers.",
        "",
    ]
    for name, config in CONFIGS.items():
        model = build(config)
        total = sum(p.numel() for p in model.parameters())
        attention, mlp = TARGETS[config.model_type]
        config.to_json_file(OUT / f"{name}.json")
        lines += [
            "[[model]]",
            f'name = "{name}"',
            f'model_type = "{config.model_type}"',
            f"parameters = {total}",
            f"lora_attention = {lora_count(model, [attention])}",
            f"lora_all_linear = {lora_count(model, [attention, mlp])}",
            "",
        ]
        print(f"{name:20} {total / 1e9:7.3f} B")
    (OUT / "counts.toml").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
