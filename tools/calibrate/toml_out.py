"""Writes the measurements as tests/data/planner_calibration.toml (stable order and format)."""

import json
import platform

HEADER = """\
# Live tensor bytes of one real training step per setup, measured on a CPU made to keep what a
# CUDA step keeps. Written by tools/calibrate/calibrate.py; do not edit by hand. Regenerate:
#   python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch torchvision transformers peft
#   /tmp/torchenv/bin/python tools/calibrate/selfcheck.py   # the accounting's own checks
#   /tmp/torchenv/bin/python tools/calibrate/calibrate.py   # rewrites this file and the configs
# tools/calibrate/README.md explains the method and the CPU-versus-CUDA emulation.
#
# What a step is: a warm-up step first (so the optimizer's states exist), then the measured
# step: forward with the loss (under autocast for bf16-mixed), loss.backward(),
# optimizer.step(), optimizer.zero_grad(set_to_none=True). Bytes are the sum of the sizes of
# the distinct tensor storages alive at a moment (views counted once), i.e. what
# torch.cuda.memory_allocated() would report less allocator rounding; no CUDA context, no
# allocator reserve, no kernel workspaces. AdamW's per-parameter `step` counters are not
# counted (on CUDA they live on the host for the default non-fused AdamW).
#
# Fields of each [[measurement]]:
#   id                    setup name
#   config                the model's Hugging Face config.json (path from the repository root);
#                         random weights were built from it. Absent for torchvision models.
#   model                 preset name where there is no config.json (resnet50)
#   family                config.json's model_type (resnet for ResNet-50)
#   method                full | lora
#   lora_rank, lora_alpha, lora_targets (attention | all-linear), lora_modules (the exact
#                         target_modules given to PEFT, matched as name suffixes), lora_layers
#                         (how many linear layers got an adapter): LoRA rows only; lora_dropout 0
#   precision             fp32 | bf16-mixed (torch.autocast bf16; fp32 weights, but LoRA's frozen
#                         model in bf16 as from_pretrained(dtype=bfloat16) loads it) | bf16 (model
#                         in bf16; PEFT's adapters stay fp32)
#   optimizer             adamw (torch.optim.AdamW, foreach, weight_decay 0.01) | sgd (momentum 0.9,
#                         foreach)
#   micro_batch           sequences (or images) in the step
#   seq_len | image_size  tokens per sequence, or the square image side in pixels
#   checkpointing         none | full (Hugging Face gradient checkpointing, use_reentrant=False)
#   attention             eager | sdpa (config attn_implementation)
#   task                  lm (causal or masked LM; T5: seq2seq LM) | classification
#   dropout               whether the family's dropout layers were on (library defaults, p = 0.1)
#   use_cache             config use_cache as run: true makes the model fill a KV cache in the
#                         training forward (README: what that keeps)
#   parameters_total, parameters_trainable   numbers of parameters (tied weights once)
#   weights_bytes         parameters and buffers (buffers_bytes of it: rotary tables, position ids)
#   gradients_bytes       .grad of the trainable parameters after backward
#   optimizer_bytes       optimizer states (AdamW: exp_avg, exp_avg_sq; SGD: momentum)
#   batch_bytes           the step's input tensors (part of activations)
#   peak_total_bytes      the largest total of the step; peak_phase: forward | backward |
#                         optimizer; peak_op: the operator whose output reached it
#   at_peak_*_bytes       that total by category: weights, gradients (buffers that are or
#                         become a .grad), optimizer (states), activations (everything else:
#                         tensors kept for backward, temporaries, autocast's weight copies,
#                         the batch, foreach optimizer temporaries). at_peak_weight_copies_bytes
#                         is the autocast copies part of activations.
#   forward_end_*         the moment the loss is computed (autocast exited): total, activations
#                         (what backward will read, logits' loss included, plus the batch) and
#                         the weight copies part of it
#   phase_max_{forward,backward,optimizer}_bytes   the largest total within each phase
#   notes                 what else matters to read the row
"""

ORDER = [
    "config", "model", "family", "method", "lora_rank", "lora_alpha", "lora_targets",
    "lora_modules", "lora_layers", "precision", "optimizer", "micro_batch", "seq_len", "image_size",
    "checkpointing", "attention", "task", "dropout", "use_cache", "parameters_total",
    "parameters_trainable", "weights_bytes", "buffers_bytes", "gradients_bytes",
    "optimizer_bytes", "batch_bytes", "peak_total_bytes", "peak_phase", "peak_op",
    "at_peak_weights_bytes", "at_peak_gradients_bytes", "at_peak_optimizer_bytes",
    "at_peak_activations_bytes", "at_peak_weight_copies_bytes", "forward_end_total_bytes",
    "forward_end_activations_bytes", "forward_end_weight_copies_bytes",
    "phase_max_forward_bytes", "phase_max_backward_bytes", "phase_max_optimizer_bytes",
    "notes",
]


def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a valid TOML basic string for this ASCII text
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(type(v))


def versions():
    import peft
    import torch
    import torchvision
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__,
            "torchvision": torchvision.__version__}


def render(rows):
    out = [HEADER]
    out.append("[versions]")
    for name, v in versions().items():
        out.append(f"{name} = {value(v)}")
    for row in rows:
        out.append("")
        out.append("[[measurement]]")
        out.append(f"id = {value(row['id'])}")
        for key in ORDER:
            if key in row and row[key] is not None:
                out.append(f"{key} = {value(row[key])}")
    return "\n".join(out) + "\n"
