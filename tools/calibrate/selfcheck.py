"""Checks of the accounting and of each CPU-versus-CUDA claim in README.md, by measuring.

    /tmp/torchenv/bin/python tools/calibrate/selfcheck.py

Every check asserts; the printed numbers are the ones README.md quotes.
"""

import gc
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_like import (  # noqa: E402
    CUDA_FP32, CUDA_FP32_SET_OPT_DTYPE, cuda_like, emulated_autocast_ops, missing_cuda_policies)
from tracker import StorageTracker  # noqa: E402


def kept_after_forward(fn, inputs):
    """Bytes a forward pass leaves live besides its inputs and a scalar result."""
    tracker = StorageTracker()
    for t in inputs:
        tracker.track(t, "weights")
    with tracker:
        tracker.phase = "forward"
        out = fn(*inputs).float().sum()
        gc.collect()
        kept = tracker.total - sum(t.untyped_storage().nbytes() for t in inputs) \
            - out.untyped_storage().nbytes()
        out.backward()
    return kept


def check_lifetimes():
    # A tensor autograd saved keeps its storage counted after its last Python reference
    # is gone, and is released by the backward pass.
    tracker = StorageTracker()
    x = torch.randn(1000, requires_grad=True)
    tracker.track(x, "weights")
    with tracker:
        tracker.phase = "forward"
        y = x.exp()  # exp saves its output
        loss = y.sum()
        del y
        gc.collect()
        assert tracker.total == 4000 + 4000 + 4, tracker.total
        loss.backward()
        del loss
        gc.collect()
        # Left: x and its gradient, which only the C++ side refers to.
        assert tracker.total == 4000 + 4000, tracker.total
        x.grad = None
        gc.collect()
        assert tracker.total == 4000, tracker.total
    # Views and in-place results are not counted twice.
    tracker = StorageTracker()
    with tracker:
        tracker.phase = "forward"
        a = torch.zeros(256)
        b = a.view(16, 16).t()
        b.add_(1)
        assert tracker.total == 1024, tracker.total
        del a, b
    print("lifetimes: saved tensors, C++-held gradients, views: ok")


def check_tiny_mlp():
    """A two-layer MLP, every live tensor of one AdamW step known by hand."""
    from calibrate import train_step
    from setups import Setup

    torch.manual_seed(0)
    n, d_in, d_hidden, d_out = 32, 64, 256, 10
    model = torch.nn.Sequential(
        torch.nn.Linear(d_in, d_hidden), torch.nn.ReLU(), torch.nn.Linear(d_hidden, d_out))
    params = list(model.parameters())
    w = sum(p.numel() for p in params) * 4
    optimizer = torch.optim.AdamW(params, foreach=True)
    batch = {"images": torch.randn(n, d_in), "labels": torch.randint(0, d_out, (n,))}
    setup = Setup("mlp", "mlp")  # fp32: no autocast; the "images" batch is run as ResNet's
    train_step(setup, model, optimizer, batch)
    tracker = StorageTracker()
    for p in params:
        tracker.track(p, "weights")
    for state in optimizer.state.values():
        tracker.ignore(state["step"])
        tracker.track(state["exp_avg"], "optimizer")
        tracker.track(state["exp_avg_sq"], "optimizer")
    for t in batch.values():
        tracker.track(t, "batch")
    with tracker:
        train_step(setup, model, optimizer, batch, tracker)
    batch_bytes = n * d_in * 4 + n * 8
    # Kept for backward: ReLU's output (also the second matmul's input), log_softmax's
    # output, the loss and nll_loss's total_weight (fp32 scalars), besides the batch.
    forward_end = tracker.at_mark("forward_end")["activations"]
    expected = batch_bytes + n * d_hidden * 4 + n * d_out * 4 + 4 + 4
    assert forward_end == expected, (forward_end, expected)
    # The peak: weights, gradients, both AdamW states and foreach's sqrt(exp_avg_sq).
    assert tracker.peak_phase == "optimizer"
    assert tracker.peak == 5 * w + batch_bytes, (tracker.peak, 5 * w + batch_bytes)
    assert tracker.at_peak() == {"weights": w, "gradients": w, "optimizer": 2 * w,
                                 "activations": w + batch_bytes, "weight_copy": 0,
                                 "batch": batch_bytes}, tracker.at_peak()
    print(f"tiny MLP: forward end {forward_end} B, peak {tracker.peak} B = 5 x {w} + batch: ok")

    # The same step with PyTorch's CPU default (a loop over parameters, no foreach): the
    # step's temporaries are sqrt(exp_avg_sq) and its quotient for one parameter at a time.
    optimizer = torch.optim.AdamW(params, foreach=False)
    train_step(setup, model, optimizer, batch)
    tracker = StorageTracker()
    for p in params:
        tracker.track(p, "weights")
    for state in optimizer.state.values():
        tracker.ignore(state["step"])
        tracker.track(state["exp_avg"], "optimizer")
        tracker.track(state["exp_avg_sq"], "optimizer")
    for t in batch.values():
        tracker.track(t, "batch")
    with tracker:
        train_step(setup, model, optimizer, batch, tracker)
    largest = max(p.numel() for p in params) * 4
    assert tracker.phase_max["optimizer"] == 4 * w + 2 * largest + batch_bytes, (
        tracker.phase_max["optimizer"], 4 * w + 2 * largest + batch_bytes)
    print(f"tiny MLP, per-parameter AdamW (CPU default): optimizer step at 4 x {w} + "
          f"2 x {largest} (largest parameter) + batch: ok")


def check_dropout():
    x = torch.randn(1 << 20, requires_grad=True)
    xb = torch.randn(1 << 20, dtype=torch.bfloat16, requires_grad=True)
    drop = lambda t: F.dropout(t, 0.1, True)  # noqa: E731
    cpu32, cpu16 = kept_after_forward(drop, [x]), kept_after_forward(drop, [xb])
    with cuda_like():
        cuda32, cuda16 = kept_after_forward(drop, [x]), kept_after_forward(drop, [xb])
    per = 1 << 20
    print(f"dropout bytes kept per value: CPU fp32 {cpu32 / per}, bf16 {cpu16 / per}; "
          f"CUDA path (native_dropout) fp32 {cuda32 / per}, bf16 {cuda16 / per}")
    assert (cpu32, cpu16, cuda32, cuda16) == (4 * per, 2 * per, per, per)


def check_autocast():
    missing = missing_cuda_policies()
    assert not missing, f"CUDA-only autocast kernels of unknown policy: {missing}"
    ops = emulated_autocast_ops()
    linear = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    probes = {
        "layer_norm": lambda h: F.layer_norm(h, (64,)),
        "pow": lambda h: h.pow(3),
        "softmax": lambda h: h.softmax(-1),
        "log_softmax": lambda h: F.log_softmax(h, -1),
        "exp": torch.exp,
        "rsqrt": lambda h: h.abs().rsqrt(),
        "sum": lambda h: h.sum(-1),
        "cumsum": lambda h: h.cumsum(-1),
        "group_norm": lambda h: F.group_norm(h, 4),
        "logsumexp": lambda h: h.logsumexp(-1),
        "gelu (neither list)": F.gelu,
    }
    rows = []
    for name, probe in probes.items():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cpu = probe(linear(x)).dtype
        with cuda_like(), torch.autocast("cpu", dtype=torch.bfloat16):
            cuda = probe(linear(x)).dtype
        rows.append(f"{name}: CPU {str(cpu)[6:]}, CUDA policy {str(cuda)[6:]}")
        if "neither" in name:
            assert cpu == cuda == torch.bfloat16
        else:
            assert cpu == torch.bfloat16 and cuda == torch.float32, (name, cpu, cuda)
    print(f"autocast: {len(ops)} ops get CUDA's policy, "
          f"{len([o for o in ops if o in CUDA_FP32 + CUDA_FP32_SET_OPT_DTYPE])} of them fp32:")
    print("  " + "; ".join(rows))
    print("  emulated: " + ", ".join(ops))


def check_sdpa():
    b, h, s, d = 2, 4, 256, 64
    one = b * h * s * d  # values in one of q, k, v, output

    def run(dtype, dropout):
        qkv = [torch.randn(b, s, h, d, dtype=dtype, requires_grad=True) for _ in range(3)]
        fn = lambda q, k, v: F.scaled_dot_product_attention(  # noqa: E731
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
            dropout_p=dropout)
        return kept_after_forward(fn, qkv)

    for dtype in (torch.float32, torch.bfloat16):
        size = torch.tensor([], dtype=dtype).element_size()
        cpu0, cpu1 = run(dtype, 0.0), run(dtype, 0.1)
        with cuda_like():
            cuda1 = run(dtype, 0.1)
        # Fused kernels keep the output and an fp32 logsumexp per query and head.
        fused = one * size + b * h * s * 4
        print(f"sdpa {str(dtype)[6:]}: kept without dropout {cpu0} B (fused: output + "
              f"logsumexp = {fused}); with dropout 0.1 CPU {cpu1} B "
              f"({cpu1 / (b * h * s * s):.1f} B per score), CUDA path {cuda1} B")
        assert cpu0 == fused and cuda1 == fused and cpu1 > b * h * s * s * size


def check_effects():
    """What each emulation changes in whole setups (README quotes these)."""
    import calibrate
    from setups import SETUPS

    cases = [("gpt2-full-bf16-mixed", "autocast"), ("bert-mlm-full-bf16-mixed-eager", "autocast"),
             ("llama-full-bf16-mixed", "autocast"), ("gpt2-full-fp32-eager", "dropout"),
             ("bert-mlm-full-fp32", "sdpa")]
    for setup_id, part in cases:
        setup = next(s for s in SETUPS if s.id == setup_id)
        cuda = calibrate.measure(setup)
        cpu = calibrate.measure(setup, **{part: False})
        mib = 2**20
        print(f"{setup_id}, {part} as on the CPU instead of CUDA: forward-end activations "
              f"{cpu['forward_end_activations_bytes'] / mib:.2f} vs "
              f"{cuda['forward_end_activations_bytes'] / mib:.2f} MiB, peak "
              f"{cpu['peak_total_bytes'] / mib:.2f} vs {cuda['peak_total_bytes'] / mib:.2f} MiB")


def check_against_allocator():
    """The tracker's peak against the CPU allocator's own bytes (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    import calibrate
    from setups import SETUPS

    # fp32 setups: in bf16 ones FastBf16's fp32 operands would show in the allocator.
    for setup_id in ("llama-full-fp32", "gpt2-full-fp32-eager"):
        setup = next(s for s in SETUPS if s.id == setup_id)
        tracked = calibrate.measure(setup)
        model, config = calibrate.build_model(setup)
        optimizer = calibrate.build_optimizer(setup, model)
        batch = calibrate.make_batch(setup, config)
        with cuda_like():
            calibrate.train_step(setup, model, optimizer, batch)
            gc.collect()
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                calibrate.train_step(setup, model, optimizer, batch)
        # Every allocation and free the CPU allocator reported, in order.
        deltas = sorted(
            (e.start_ns(), e.nbytes())
            for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
        live = peak = 0
        for _, delta in deltas:
            live += delta
            peak = max(peak, live)
        start = (tracked["weights_bytes"] + tracked["optimizer_bytes"]
                 + tracked["batch_bytes"])
        mine = tracked["peak_total_bytes"] - start
        print(f"{setup_id}: peak above the step's start: tracker {mine / 2**20:.2f} MiB, "
              f"CPU allocator {peak / 2**20:.2f} MiB (difference {peak - mine:+d} B)")
        assert abs(peak - mine) < 0.03 * mine


if __name__ == "__main__":
    torch.set_num_threads(2)
    check_lifetimes()
    check_tiny_mlp()
    check_dropout()
    check_autocast()
    check_sdpa()
    check_against_allocator()
    check_effects()
    print("all checks passed")
