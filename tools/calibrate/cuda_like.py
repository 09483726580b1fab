"""Make a CPU training step keep the tensors a CUDA step keeps.

The planner models CUDA training; these measurements run on a CPU. Where PyTorch takes a
different path on the two devices, a Python kernel registered for a CPU dispatch key
reproduces the CUDA path (README.md, "CPU versus CUDA", has the measurements behind each):

* dropout: ATen's `dropout` uses the fused `native_dropout` (1-byte bool mask kept for
  backward) only on CUDA; on the CPU it multiplies by a noise tensor of the input's type (4 or
  2 bytes a value kept). An AutogradCPU kernel routes `dropout` to `native_dropout`, which the
  CPU implements too.
* autocast: CUDA's autocast runs ~50 ops in fp32 that the CPU's leaves in bf16 (layer_norm,
  pow, softmax, log_softmax, exp, rsqrt, sum, ...), and casts or promotes a few more.
  AutocastCPU kernels apply CUDA's policy to exactly the ops that have a CUDA autocast
  kernel and no CPU one in the installed torch.
* scaled_dot_product_attention: on CUDA a fused kernel (cuDNN, flash or memory-efficient)
  runs for every setup here, also with dropout; the CPU falls back to the math path when
  dropout > 0 (keeping the attention probabilities). An AutogradCPU kernel always runs the
  CPU's fused kernel, without dropout (the fused CUDA kernels keep no dropout mask, only an
  RNG seed and offset).
* foreach optimizers: passed explicitly where the optimizer is built (calibrate.py).
"""

import contextlib
import functools

import torch
from torch.utils._pytree import tree_flatten, tree_map_only

C = torch._C
LOW = (torch.bfloat16, torch.float16)

# CUDA autocast policies (aten/src/ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP,
# AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE,
# AT_FORALL_PROMOTE). Only ops without a CPU autocast kernel are emulated;
# `missing_cuda_policies()` checks these lists against the installed torch's dispatcher.
CUDA_LOWER = [
    "convolution", "_convolution", "addmv", "addr", "einsum", "mv", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell",
    "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
]
CUDA_FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm",
    "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "dist",
    "pdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
    "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d",
    "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d",
    "_upsample_bicubic2d_aa",
]
CUDA_FP32_SET_OPT_DTYPE = [
    "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
]
CUDA_FP32_APPEND_DTYPE = {"norm.Scalar": "norm.ScalarOpt_dtype",
                          "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
CUDA_PROMOTE = [
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "index_put",
    "tensordot", "scatter_add",
]
# Kernels that exist only on CUDA: a CPU never reaches them (it has its own entry points).
CUDA_ONLY_KERNELS = [
    "_cudnn_rnn", "_scaled_dot_product_flash_attention", "cudnn_convolution",
    "cudnn_convolution_transpose",
]
KNOWN = (CUDA_LOWER + CUDA_FP32 + CUDA_FP32_SET_OPT_DTYPE + list(CUDA_FP32_APPEND_DTYPE)
         + CUDA_PROMOTE)


def _op(name):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _has(name, key):
    return C._dispatch_has_kernel_for_dispatch_key("aten::" + name, key)


def emulated_autocast_ops():
    """The ops whose autocast policy differs: a CUDA kernel, no CPU kernel."""
    return [
        name for name in KNOWN if _has(name, "AutocastCUDA") and not _has(name, "AutocastCPU")
    ]


def missing_cuda_policies():
    """Ops with a CUDA-only autocast kernel that this module does not know the policy of."""
    known = set(KNOWN + CUDA_ONLY_KERNELS)
    out = []
    for name in C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        short = name[len("aten::"):]
        if _has(short, "AutocastCUDA") and not _has(short, "AutocastCPU") and short not in known:
            out.append(short)
    return sorted(out)


def _no_cpu_autocast():
    return C._ExcludeDispatchKeyGuard(C.DispatchKeySet(C.DispatchKey.AutocastCPU))


def _to_fp32(tensor):
    return tensor.float() if tensor.dtype in LOW else tensor


def _floating(tensor):
    return tensor.is_floating_point() and tensor.dtype != torch.float64


def _lower_kernel(op):
    # CUDA's `lower_precision_fp` policy: floating inputs cast to the autocast dtype.
    def kernel(*args, **kwargs):
        low = torch.get_autocast_dtype("cpu")
        with _no_cpu_autocast():
            cast = lambda t: t.to(low) if _floating(t) else t  # noqa: E731
            args, kwargs = tree_map_only(torch.Tensor, cast, (args, kwargs))
            return op(*args, **kwargs)

    return kernel


def _promote_kernel(op):
    # CUDA's `promote` policy: floating inputs cast to the widest floating type among them.
    def kernel(*args, **kwargs):
        with _no_cpu_autocast():
            types = [t.dtype for t in tree_flatten((args, kwargs))[0]
                     if isinstance(t, torch.Tensor) and _floating(t)]
            if types:
                wide = functools.reduce(torch.promote_types, types)
                cast = lambda t: t.to(wide) if _floating(t) else t  # noqa: E731
                args, kwargs = tree_map_only(torch.Tensor, cast, (args, kwargs))
            return op(*args, **kwargs)

    return kernel


def _append_dtype_kernel(op, with_dtype):
    # CUDA's `fp32_append_dtype` (norm): redispatched to the overload taking a dtype.
    def kernel(*args, **kwargs):
        with _no_cpu_autocast():
            if _floating(args[0]):
                return with_dtype(*args, dtype=torch.float32)
            return op(*args, **kwargs)

    return kernel


def _fp32_kernel(op):
    # CUDA's `fp32` policy: every floating input that is not fp32 (or fp64) is cast first.
    def kernel(*args, **kwargs):
        with _no_cpu_autocast():
            args, kwargs = tree_map_only(torch.Tensor, _to_fp32, (args, kwargs))
            return op(*args, **kwargs)

    return kernel


def _set_opt_dtype_kernel(op):
    # CUDA's `fp32_set_opt_dtype`: with no explicit dtype, the op runs with dtype=float32.
    names = [argument.name for argument in op._schema.arguments]
    index = names.index("dtype")
    kwarg_only = op._schema.arguments[index].kwarg_only

    def kernel(*args, **kwargs):
        with _no_cpu_autocast():
            first = args[0]
            if isinstance(first, torch.Tensor) and first.is_floating_point():
                if not kwarg_only and len(args) > index:
                    if args[index] is None:
                        args = args[:index] + (torch.float32,) + args[index + 1:]
                elif kwargs.get("dtype") is None:
                    if kwarg_only:
                        kwargs["dtype"] = torch.float32
                    else:
                        args = args + (None,) * (index - len(args)) + (torch.float32,)
            return op(*args, **kwargs)

    return kernel


def _dropout(input, p, train):
    # ATen's CompositeImplicit `dropout`, with the CUDA branch (`is_fused_kernel_acceptable`).
    if train and 0 < p < 1 and input.numel() > 0:
        return torch.ops.aten.native_dropout.default(input, p, train)[0]
    if p == 0 or not train or input.numel() == 0:
        return input
    return input * torch.zeros((), dtype=input.dtype)  # p == 1


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    # The fused kernel CUDA picks keeps query, key, value, output and an fp32 logsumexp
    # (autograd nodes ScaledDotProduct{Cudnn,Flash,Efficient}AttentionBackward0), as the
    # CPU's flash kernel does; its dropout keeps no mask. The CPU kernel maps grouped
    # key/value heads itself, as the CUDA kernels do (`enable_gqa`).
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # What ATen does before every fused kernel (convert_boolean_attn_mask).
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
            attn_mask.logical_not(), float("-inf")
        )
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(
        query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


@contextlib.contextmanager
def cuda_like(autocast=True, dropout=True, sdpa=True):
    """Registers the CUDA-path kernels for the duration of the block."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        if autocast:
            for name in emulated_autocast_ops():
                op = _op(name)
                if name in CUDA_LOWER:
                    kernel = _lower_kernel(op)
                elif name in CUDA_PROMOTE:
                    kernel = _promote_kernel(op)
                elif name in CUDA_FP32_SET_OPT_DTYPE:
                    kernel = _set_opt_dtype_kernel(op)
                elif name in CUDA_FP32_APPEND_DTYPE:
                    kernel = _append_dtype_kernel(op, _op(CUDA_FP32_APPEND_DTYPE[name]))
                else:
                    kernel = _fp32_kernel(op)
                lib.impl(name, kernel, "AutocastCPU")
        if dropout:
            lib.impl("dropout", _dropout, "AutogradCPU")
        if sdpa:
            lib.impl("scaled_dot_product_attention", _sdpa, "AutogradCPU")
        yield
    finally:
        lib._destroy()
