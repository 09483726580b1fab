"""Measure one real training step per setup and write tests/data/planner_calibration.toml.

    /tmp/torchenv/bin/python tools/calibrate/calibrate.py            # every setup, ~5 min
    /tmp/torchenv/bin/python tools/calibrate/calibrate.py llama-     # setups by id prefix
                                                                     # (prints, writes nothing)
    /tmp/torchenv/bin/python tools/calibrate/calibrate.py --table /tmp/t.toml   # elsewhere
    /tmp/torchenv/bin/python tools/calibrate/calibrate.py gpt2-full-fp32 --explain
                                   # also the largest live storages at the peak and forward end

See README.md for what is measured and how the CPU run is made to keep what CUDA keeps.
"""

import contextlib
import gc
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_like import cuda_like  # noqa: E402
from setups import DROPOUT_FIELDS, MODELS, SETUPS  # noqa: E402
from tracker import PHASES, FastBf16, StorageTracker  # noqa: E402
import toml_out  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "tests" / "data" / "calibration" / "configs"
TABLE = ROOT / "tests" / "data" / "planner_calibration.toml"
SEED = 0


# -- building ----------------------------------------------------------------------------------
def build_config(setup):
    config_class, model_class, fields = MODELS[setup.model]
    fields = dict(fields)
    # Without `dropout`, every dropout field a family has is set to 0.
    for name, default in DROPOUT_FIELDS.get(setup.model, {}).items():
        fields[name] = default if setup.dropout else 0.0
    if setup.model not in ("vit",):
        fields["use_cache"] = setup.use_cache
    config = config_class(attn_implementation=setup.attention, **fields)
    config.architectures = [model_class.__name__]
    return config


def build_model(setup):
    torch.manual_seed(SEED)
    if setup.model == "resnet50":
        import torchvision

        model, config = torchvision.models.resnet50(num_classes=1000), None
    else:
        config = build_config(setup)
        model = MODELS[setup.model][1](config)
    model.train()
    # Pure bf16 trains a bf16 model; LoRA under bf16-mixed loads the frozen model in bf16
    # (from_pretrained(dtype=torch.bfloat16), as the planner's export says) and PEFT keeps
    # the adapters in fp32.
    if setup.precision == "bf16" or (setup.method == "lora" and setup.precision == "bf16-mixed"):
        model.to(torch.bfloat16)
    if setup.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if setup.method == "lora":
            model.enable_input_require_grads()  # as PEFT's recipes do with checkpointing
    if setup.method == "lora":
        import peft

        lora_config = peft.LoraConfig(
            r=setup.lora_rank,
            lora_alpha=2 * setup.lora_rank,
            lora_dropout=0.0,
            target_modules=setup.lora_modules,
            # GPT-2's c_attn/c_proj/c_fc are Conv1D layers: weights stored transposed.
            fan_in_fan_out=setup.model == "gpt2",
        )
        model = peft.get_peft_model(model, lora_config)
    return model, config


def make_batch(setup, config):
    generator = torch.Generator().manual_seed(SEED)
    b, s = setup.batch, setup.seq_len
    if setup.model == "resnet50":
        return {"images": torch.randn(b, 3, s, s, generator=generator),
                "labels": torch.randint(0, 1000, (b,), generator=generator)}
    if setup.model == "vit":
        return {"pixel_values": torch.randn(b, 3, s, s, generator=generator),
                "labels": torch.randint(0, config.num_labels, (b,), generator=generator)}
    ids = torch.randint(3, config.vocab_size, (b, s), generator=generator)
    labels = ids.clone()
    if setup.model in ("bert", "roberta"):
        # Masked LM: 15 % of the positions carry a label (the logits cover every position).
        keep = torch.rand(b, s, generator=generator) < 0.15
        labels[~keep] = -100
    return {"input_ids": ids, "labels": labels}


def compute_loss(model, batch):
    if "images" in batch:
        return F.cross_entropy(model(batch["images"]), batch["labels"])
    # As the Hugging Face Trainer does: the model computes its loss, only the loss is kept.
    return model(**batch).loss


def build_optimizer(setup, model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    # foreach=True: PyTorch picks the foreach implementation by default only for CUDA
    # tensors; on the CPU it would loop per parameter without the foreach temporaries.
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.01, foreach=True)
    if setup.optimizer == "sgd":
        return torch.optim.SGD(trainable, lr=1e-3, momentum=0.9, foreach=True)
    raise ValueError(setup.optimizer)


# -- the step ------------------------------------------------------------------------------------
def train_step(setup, model, optimizer, batch, tracker=None):
    def phase(name):
        if tracker is not None:
            tracker.phase = name

    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if setup.precision == "bf16-mixed"
        else contextlib.nullcontext()
    )
    phase("forward")
    with autocast:
        loss = compute_loss(model, batch)
    # Leaving autocast clears its cache of weight copies (as on CUDA); what is still live
    # is what the backward pass needs, the logits' loss included.
    if tracker is not None:
        tracker.mark("forward_end")
    phase("backward")
    loss.backward()
    del loss
    if tracker is not None:
        for p in model.parameters():
            if p.grad is not None:
                tracker.retag(p.grad, "gradients")
        tracker.mark("backward_end")
    phase("optimizer")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    phase("done")


def unique_bytes(tensors):
    storages = {}
    for t in tensors:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def measure(setup, **emulation):
    """One measured step; `emulation` switches parts of cuda_like() off (selfcheck.py)."""
    model, config = build_model(setup)
    optimizer = build_optimizer(setup, model)
    batch = make_batch(setup, config)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    with cuda_like(**emulation):
        with FastBf16():
            train_step(setup, model, optimizer, batch)  # warm-up: the optimizer's states exist
        gc.collect()
        tracker = StorageTracker()
        for p in params:
            tracker.track(p, "weights")
        for b in model.buffers():
            tracker.track(b, "weights")
        step_tensors = 0
        for state in optimizer.state.values():
            for name, value in state.items():
                if not isinstance(value, torch.Tensor):
                    continue
                if name == "step":
                    # A CPU scalar on CUDA too (non-capturable, non-fused AdamW): not
                    # device memory, so not counted.
                    tracker.ignore(value)
                    step_tensors += 1
                else:
                    tracker.track(value, "optimizer")
        for t in batch.values():
            tracker.track(t, "batch")
        start = tracker.now()
        start_total = tracker.total
        with tracker:
            train_step(setup, model, optimizer, batch, tracker)
        gc.collect()
        end_total = tracker.total

    # -- sanity checks: the accounting against what the model and optimizer hold ----------
    weights = unique_bytes(params) + unique_bytes(list(model.buffers()))
    buffers = unique_bytes(list(model.buffers()))
    grads = sum(p.numel() * p.element_size() for p in trainable)
    states = {"adamw": 2, "sgd": 1}[setup.optimizer] * grads
    batch_bytes = unique_bytes(list(batch.values()))
    assert start["weights"] == weights, (start, weights)
    assert start["optimizer"] == states, (start, states)
    assert start["activations"] == batch_bytes and start["gradients"] == 0, start
    assert tracker.at_mark("backward_end")["gradients"] == grads, (
        tracker.at_mark("backward_end"), grads)
    assert end_total == start_total, f"{end_total - start_total} bytes leaked by the step"
    # The peak can only be where every category's bytes add up to the total.
    at_peak = tracker.at_peak()
    assert sum(at_peak[c] for c in ("weights", "gradients", "optimizer", "activations")) \
        == tracker.peak

    forward_end = tracker.at_mark("forward_end")
    return {
        "parameters_total": sum(p.numel() for p in params),
        "parameters_trainable": sum(p.numel() for p in trainable),
        "weights_bytes": weights,
        "buffers_bytes": buffers,
        "gradients_bytes": grads,
        "optimizer_bytes": states,
        "optimizer_step_tensors": step_tensors,
        "batch_bytes": batch_bytes,
        "peak_total_bytes": tracker.peak,
        "peak_phase": tracker.peak_phase,
        "peak_op": tracker.peak_op,
        "at_peak_weights_bytes": at_peak["weights"],
        "at_peak_gradients_bytes": at_peak["gradients"],
        "at_peak_optimizer_bytes": at_peak["optimizer"],
        "at_peak_activations_bytes": at_peak["activations"],
        "at_peak_weight_copies_bytes": at_peak["weight_copy"],
        "forward_end_total_bytes": sum(forward_end[c] for c in
                                       ("weights", "gradients", "optimizer", "activations")),
        "forward_end_activations_bytes": forward_end["activations"],
        "forward_end_weight_copies_bytes": forward_end["weight_copy"],
        **{f"phase_max_{p}_bytes": tracker.phase_max[p] for p in PHASES},
        "config_object": config,
        "explain": {"peak": tracker.by_origin(tracker.peak_snapshot),
                    "forward_end": tracker.by_origin(tracker.marks["forward_end"])},
        "lora_adapted": [name for name, module in model.named_modules()
                         if hasattr(module, "lora_A")],
    }


DECODERS = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi2", "phi3",
            "gpt-neox", "gpt2", "t5"}


def notes(setup):
    out = list(setup.notes)
    if setup.precision == "bf16-mixed":
        out.append("autocast bf16 with CUDA's op policy (emulated on the CPU)")
    if setup.dropout:
        out.append("dropout p=0.1 as the family's default; masks as CUDA keeps them (1-byte "
                   "bool, native_dropout)" + ("; attention dropout inside the fused SDPA kernel, "
                                               "no mask" if setup.attention == "sdpa" else ""))
    if setup.model in DECODERS and setup.use_cache:
        out.append("use_cache: the training forward fills a DynamicCache, and attention keeps "
                   "its torch.cat copies of keys and values")
    if setup.method == "lora" and setup.precision == "bf16":
        out.append("PEFT keeps the adapters in fp32 (autocast_adapter_dtype) and casts their "
                   "inputs to fp32")
    if setup.method == "lora" and setup.precision == "bf16-mixed":
        out.append("frozen model loaded in bf16, adapters in fp32 (autocast_adapter_dtype), "
                   "autocast bf16")
    if setup.method == "lora" and setup.checkpointing != "none":
        out.append("enable_input_require_grads, as PEFT recipes do with checkpointing")
    if setup.model in ("bert", "roberta"):
        out.append("masked LM: labels on 15 % of the positions; logits over all of them")
    if setup.model == "gemma2":
        out.append("attention logit softcapping, which needs eager attention")
    if setup.model == "t5":
        out.append("encoder-decoder (decoder length = seq_len); the planner's importer "
                   "does not read t5")
    if setup.model == "resnet50":
        out.append("torchvision resnet50, 1000 classes, channels-first")
    return out


def row(setup, result, config_path):
    config = result["config_object"]
    r = {"id": setup.id, "config": config_path}
    if config is None:
        r["model"], r["family"] = setup.model, "resnet"
    else:
        r["family"] = config.model_type
    r["method"] = setup.method
    if setup.method == "lora":
        r.update(lora_rank=setup.lora_rank, lora_alpha=2 * setup.lora_rank,
                 lora_targets=setup.lora_targets, lora_modules=setup.lora_modules)
    r.update(precision=setup.precision, optimizer=setup.optimizer, micro_batch=setup.batch)
    r["image_size" if setup.model in ("vit", "resnet50") else "seq_len"] = setup.seq_len
    r.update(checkpointing=setup.checkpointing, attention=setup.attention, task=setup.task,
             dropout=setup.dropout)
    if config is not None and hasattr(config, "use_cache") and setup.model != "vit":
        r["use_cache"] = setup.use_cache
    if setup.model == "resnet50":
        r["attention"] = None  # no attention
    if setup.method == "lora":
        r["lora_layers"] = len(result["lora_adapted"])
    r.update({k: v for k, v in result.items() if k not in ("config_object", "explain",
                                                            "lora_adapted",
                                                            "optimizer_step_tensors")})
    r["notes"] = notes(setup)
    return r


def main(argv):
    torch.set_num_threads(2)
    explain = "--explain" in argv
    table = TABLE
    if "--table" in argv:  # write the table elsewhere (the configs still go to CONFIG_DIR)
        table = Path(argv[argv.index("--table") + 1]).resolve()
        argv = argv[:argv.index("--table")] + argv[argv.index("--table") + 2:]
    prefixes = [a for a in argv[1:] if a != "--explain"]
    chosen = [s for s in SETUPS if not prefixes or any(s.id.startswith(p) for p in prefixes)]
    rows = []
    for setup in chosen:
        result = measure(setup)
        if setup.method == "lora":
            # Every target matched, and nothing else was adapted.
            adapted = result["lora_adapted"]
            for target in setup.lora_modules:
                assert any(name.endswith("." + target) for name in adapted), (setup.id, target)
            assert all(any(name.endswith("." + t) for t in setup.lora_modules)
                       for name in adapted), (setup.id, adapted)
        mib = 1 << 20
        print(f"{setup.id:48} peak {result['peak_total_bytes'] / mib:8.1f} MiB "
              f"({result['peak_phase']}): w {result['at_peak_weights_bytes'] / mib:.1f} "
              f"g {result['at_peak_gradients_bytes'] / mib:.1f} "
              f"o {result['at_peak_optimizer_bytes'] / mib:.1f} "
              f"a {result['at_peak_activations_bytes'] / mib:.1f}; "
              f"fwd-end act {result['forward_end_activations_bytes'] / mib:.1f}", flush=True)
        if explain:
            for moment, groups in result["explain"].items():
                print(f"  {moment}: the largest groups of live storages")
                for (cat, tag, origin), (count, total) in groups:
                    print(f"    {total / mib:9.2f} MiB {count:4} x {cat:11} {tag:11} {origin}")
        config_path = None
        if result["config_object"] is not None:
            config_path = str(CONFIG_DIR.relative_to(ROOT) / f"{setup.id}.json")
        rows.append((setup, result, config_path))
    if prefixes:
        return
    CONFIG_DIR.mkdir(parents=True, exist_ok=True)
    for setup, result, config_path in rows:
        if config_path is not None:
            config = result["config_object"]
            # The weights' type, as a released config.json records it.
            bf16_weights = setup.precision == "bf16" or (
                setup.method == "lora" and setup.precision == "bf16-mixed")
            config.dtype = "bfloat16" if bf16_weights else "float32"
            config.to_json_file(ROOT / config_path, use_diff=False)
    table.write_text(toml_out.render([row(*r) for r in rows]))
    print(f"wrote {table} and {len(rows)} configs", flush=True)


if __name__ == "__main__":
    main(sys.argv)
