"""Checks gputune's Hugging Face exports against the installed transformers.

Every key of each JSON file must be a field of `TrainingArguments`, and
`TrainingArguments(output_dir=..., **json)` must accept the file as it is. The machine running
this needs no GPU: the check that bf16 runs on the GPU is answered "yes", as on the Ampere+
cards the exports are written for; nothing else is changed. Files naming a DeepSpeed config
are checked for their keys only when deepspeed is not installed (TrainingArguments imports it).

    python tools/hf_export_check/check_training_args.py FILE.json...

Not run in CI (it needs transformers and torch); tools/hf_export_check/run.sh writes a matrix
of exports with gputune and checks them all.
"""

import dataclasses
import importlib.util
import json
import sys
import tempfile

import transformers
import transformers.training_args as training_args
from transformers import TrainingArguments

training_args.is_torch_bf16_gpu_available = lambda: True


def check(path: str, fields: set) -> tuple:
    with open(path) as file:
        arguments = json.load(file)
    problems = [f"{key} is not a TrainingArguments field" for key in arguments if key not in fields]
    if problems:
        return problems, "keys"
    if "deepspeed" in arguments and importlib.util.find_spec("deepspeed") is None:
        return [], "keys only: deepspeed is not installed"
    with tempfile.TemporaryDirectory() as output_dir:
        try:
            built = TrainingArguments(output_dir=output_dir, **arguments)
        except Exception as error:  # noqa: BLE001 - the error is the answer
            return [f"TrainingArguments refused it: {type(error).__name__}: {error}"], "built"
    for key, value in arguments.items():
        if key in ("fsdp", "fsdp_config", "gradient_checkpointing_kwargs", "optim"):
            continue  # normalised by TrainingArguments (FSDP options, enum, kwargs alias)
        if getattr(built, key) != value:
            problems.append(f"{key}: wrote {value!r}, TrainingArguments has {getattr(built, key)!r}")
    return problems, "keys and TrainingArguments(**json)"


def main() -> int:
    fields = {field.name for field in dataclasses.fields(TrainingArguments)}
    failures = 0
    for path in sys.argv[1:]:
        problems, checked = check(path, fields)
        failures += bool(problems)
        print(f"{'ok  ' if not problems else 'FAIL'} {path} ({checked})")
        for problem in problems:
            print(f"     {problem}")
    print(f"transformers {transformers.__version__}: {len(sys.argv) - 1 - failures} of {len(sys.argv) - 1} files accepted")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
