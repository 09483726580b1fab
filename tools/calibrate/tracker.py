"""Live tensor-storage bytes of one training step, by category and by phase.

A TorchDispatchMode sees every tensor an ATen operator returns (forward, backward and the
optimizer step alike). Each new storage is recorded once, keyed by its data pointer (views
and in-place results share their base's storage and are not counted again), and a
`weakref.finalize` on the storage's Python object removes it when the storage itself is
freed. PyTorch keeps one Python object per storage alive for as long as the C++ storage
lives (PyObject preservation), so the finalizer fires exactly when the memory goes back to
the allocator: a tensor autograd saved for backward, or a gradient that only C++ refers to,
keeps its storage counted although no Python tensor is left (checked in selfcheck.py).

What the mode cannot see: buffers a kernel allocates and frees inside one operator (the
CPU flash-attention kernel's scratch, cuBLAS/cuDNN workspaces on a GPU). They are transient
and not part of what a planner counts; the README says how large they were on the CPU.
"""

import itertools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

PHASES = ("forward", "backward", "optimizer")
# Categories reported; "weight_copy" (autocast's 16-bit copies of parameters) and "batch"
# (the step's input tensors) are sub-parts of "activations" reported on their own as well.
CATEGORIES = ("weights", "gradients", "optimizer", "activations")


class Storage:
    """One live storage: a unique serial (data pointers are reused), its size and tag."""

    __slots__ = ("serial", "nbytes", "tag", "origin")

    def __init__(self, serial, nbytes, tag, origin):
        self.serial = serial
        self.nbytes = nbytes
        self.tag = tag  # weights | gradients | optimizer | weight_copy | batch | None
        self.origin = origin  # the operator (and phase) that allocated it, for --explain


def category(tag):
    return tag if tag in ("weights", "gradients", "optimizer") else "activations"


aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


class FastBf16(TorchDispatchMode):
    """Runs bf16 matrix products in fp32 and rounds the result to bf16.

    On a CPU without AVX512-BF16 PyTorch's bf16 GEMM is ~80x slower than fp32 (20 s for one
    512 x 512 x 32000 product here). The result has the dtype, shape and layout the bf16
    kernel returns; the fp32 operands are made and freed inside the operator, where the
    tracker does not look (like a kernel's scratch), so the live bytes are unchanged.
    """

    @staticmethod
    def run(func, args, kwargs):
        if func in MATMULS and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args
        ):
            up = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
            return func(*up, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.run(func, args, kwargs or {})


class StorageTracker(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self._serials = itertools.count()
        self.live = {}  # data_ptr -> Storage
        self.total = 0
        self.phase = "setup"
        self.peak = 0
        self.peak_phase = None
        self.peak_op = None  # the operator whose output made the peak
        self.peak_snapshot = []  # the Storage objects live at the peak
        self.phase_max = dict.fromkeys(PHASES, 0)
        self.marks = {}  # name -> snapshot of (Storage, nbytes) at a named moment
        self.ignored = {}  # data_ptr -> storage: memory that would not be on the device

    # -- registration ------------------------------------------------------------------------
    def track(self, tensor, tag=None, origin=None):
        """Counts `tensor`'s storage if new; gives it `tag` if it has none yet."""
        if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
            return None
        storage = tensor.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr == 0 or nbytes == 0 or ptr in self.ignored:
            return None
        entry = self.live.get(ptr)
        if entry is None:
            entry = Storage(next(self._serials), nbytes, tag, origin)
            self.live[ptr] = entry
            self.total += nbytes
            weakref.finalize(storage, self._free, ptr, entry.serial)
        else:
            if entry.nbytes != nbytes:  # resize_ of an existing storage
                self.total += nbytes - entry.nbytes
                entry.nbytes = nbytes
            if tag is not None and entry.tag in (None, "batch"):
                entry.tag = tag
        return entry

    def ignore(self, tensor):
        """Never counts `tensor`'s storage (held here, so its address is not reused)."""
        storage = tensor.untyped_storage()
        self.ignored[storage.data_ptr()] = storage

    def retag(self, tensor, tag):
        """Sets the tag of an already tracked storage (a buffer that became a .grad)."""
        entry = self.track(tensor)
        if entry is not None:
            entry.tag = tag

    def _free(self, ptr, serial):
        entry = self.live.get(ptr)
        if entry is not None and entry.serial == serial:
            del self.live[ptr]
            self.total -= entry.nbytes

    def _observe(self, origin=None):
        if self.phase in self.phase_max and self.total > self.phase_max[self.phase]:
            self.phase_max[self.phase] = self.total
        if self.phase in PHASES and self.total > self.peak:
            self.peak = self.total
            self.peak_phase = self.phase
            self.peak_op = origin
            # Categories are read later: a buffer becomes a gradient only once autograd
            # stores it as .grad, and the Storage objects carry that tag when it is set.
            self.peak_snapshot = list(self.live.values())

    # -- the mode ------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = FastBf16.run(func, args, kwargs or {})
        tag = None
        if func is torch.ops.aten._to_copy.default:
            source = self.live.get(args[0].untyped_storage().data_ptr())
            if source is not None and source.tag == "weights":
                tag = "weight_copy"  # autocast's (or an explicit) copy of a parameter
        origin = f"{self.phase}:{func.__name__}"
        for tensor in tree_flatten(out)[0]:
            self.track(tensor, tag, origin)
        self._observe(func.__name__)
        return out

    # -- reading -------------------------------------------------------------------------------
    def mark(self, name):
        self.marks[name] = [(entry, entry.nbytes) for entry in self.live.values()]

    @staticmethod
    def breakdown(entries):
        """Bytes per category (plus the weight_copy and batch sub-parts of activations)."""
        result = dict.fromkeys(CATEGORIES + ("weight_copy", "batch"), 0)
        for item in entries:
            entry, nbytes = item if isinstance(item, tuple) else (item, item.nbytes)
            result[category(entry.tag)] += nbytes
            if entry.tag in ("weight_copy", "batch"):
                result[entry.tag] += nbytes
        return result

    @staticmethod
    def by_origin(entries, top=12):
        """The largest groups of live bytes by (category, allocating operator)."""
        groups = {}
        for item in entries:
            entry, nbytes = item if isinstance(item, tuple) else (item, item.nbytes)
            key = (category(entry.tag), entry.tag or "", entry.origin or "before the step")
            count, total = groups.get(key, (0, 0))
            groups[key] = (count + 1, total + nbytes)
        return sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]

    def at_peak(self):
        return self.breakdown(self.peak_snapshot)

    def at_mark(self, name):
        return self.breakdown(self.marks[name])

    def now(self):
        return self.breakdown(list(self.live.values()))
