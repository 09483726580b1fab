#!/usr/bin/env bash
# Writes gputune's Hugging Face export for a matrix of setups (methods, precisions, optimizers,
# checkpointing, activation offloading, chunked cross-entropy, FSDP, ZeRO, vision models) and
# checks every file against the installed transformers (check_training_args.py).
#
#   PYTHON=/path/to/venv/bin/python bash tools/hf_export_check/run.sh [path/to/gputune]
#
# Not run in CI: it needs transformers and torch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
gputune="${1:-$here/../../target/debug/gputune}"
python="${PYTHON:-python3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
n=0
export_one() {
    n=$((n + 1))
    # --force: a setup that does not fit is still a file to check.
    "$gputune" plan --backend sim --card "A100 80GB" --export "$out/$n.json" --format hf --force "$@" >/dev/null 2>&1 || [ $? -eq 3 ]
}
for method in full lora qlora; do
    for precision in bf16-mixed fp16-mixed bf16; do
        for optimizer in adamw adamw-fused adamw-8bit paged-adamw-8bit adafactor sgd sgd-momentum; do
            export_one --model llama-3.2-1b --method "$method" --precision "$precision" --optimizer "$optimizer" --target-batch 32
        done
        export_one --model llama-3.2-1b --method "$method" --precision "$precision" --checkpointing full --activation-offload --chunked-cross-entropy --target-batch 64
        export_one --model llama-3.2-1b --method "$method" --precision "$precision" --activation-offload --target-batch 64
    done
done
export_one --model llama-3.2-1b --precision fp32 --target-batch 16
export_one --model llama-3.1-8b --method full --gpus 4 --sharding fsdp --checkpointing full --target-batch 64
export_one --model llama-3.1-8b --method full --gpus 4 --sharding fsdp --offload optimizer+params --target-batch 64
export_one --model llama-3.1-8b --method qlora --gpus 2 --sharding fsdp --checkpointing full --target-batch 64
export_one --model llama-3.1-8b --method lora --gpus 2 --sharding ddp --target-batch 64
export_one --model llama-3.1-8b --method full --gpus 4 --sharding zero3 --offload optimizer --target-batch 64
export_one --model resnet50 --precision fp16-mixed --optimizer sgd-momentum --target-batch 256
export_one --model resnet50 --gpus 2 --sharding fsdp --target-batch 256
export_one --model vit-b-16 --method lora --target-batch 128
export_one --model bert-base-uncased --task classification --seq-len 512 --target-batch 32
"$python" "$here/check_training_args.py" "$out"/*.json
