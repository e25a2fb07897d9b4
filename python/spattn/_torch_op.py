"""spattn.attention as a torch custom operator, torch.ops.spattn.attention (torch 2.1 or newer).

torch.compile sees the operator as one opaque node: its fake implementation gives the output's
shape, dtype and device without running it, so a model calling spattn.attention compiles with no
graph break. With an older torch (Debian 12's python3-torch is 1.13), spattn.attention on torch
tensors is the plain call it always was.

torch is never imported here (numpy users do not pay for it): the operator is registered when
`import spattn` finds torch already imported, else at the first call with torch tensors. Under
torch.compile, register first (import torch before spattn, or call spattn.attention once):
registering inside a compiled region would itself break the graph.
"""
import re
import sys

SCHEMA = ("attention(Tensor q, Tensor k, Tensor v, str method, bool causal, float? scale, "
          "str layout, bool return_lse, int? threads) -> (Tensor, Tensor)")

_TENSOR = None  # torch.Tensor, once registered
_OP = None  # torch.ops.spattn.attention.default, once registered
_TRIED = False  # registration ran (torch was imported then): not tried again
_LIB = None  # the torch.library.Library holding the definition, kept alive


def supported(torch):
    """Whether this torch registers Python custom operators with fake implementations."""
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (2, 1)


def register():
    """Defines torch.ops.spattn.attention where torch >= 2.1 is imported. Returns the operator,
    or None (no torch imported yet, or an older one)."""
    global _TENSOR, _OP, _TRIED, _LIB
    torch = sys.modules.get("torch")
    if _TRIED or torch is None:
        return _OP
    _TRIED = True
    if not supported(torch):
        return None
    if not hasattr(torch.ops.spattn, "attention"):  # not defined by another copy of spattn
        lib = torch.library.Library("spattn", "DEF")
        lib.define(SCHEMA)
        lib.impl("attention", _run, "CPU")
        lib.impl("attention", _run, "CUDA")
        # register_fake from torch 2.4; impl_abstract, its earlier name, from 2.1.
        fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract
        fake("spattn::attention", lib=lib)(_fake)
        _LIB = lib
    _TENSOR = torch.Tensor
    _OP = torch.ops.spattn.attention.default
    return _OP


def operator_for(q, k, v):
    """The operator where q, k, v are torch tensors it can run (CPU or CUDA), else None (the
    plain call: numpy arrays, older torch, and inputs whose errors the plain call words)."""
    if _OP is None and not _TRIED:
        register()
    if _OP is None or not all(isinstance(x, _TENSOR) for x in (q, k, v)):
        return None
    if q.device.type not in ("cpu", "cuda"):
        return None
    return _OP


def lse_shape(shape, layout):
    """The log-sum-exp's shape for q's: [batch,] heads, q_len."""
    if len(shape) not in (3, 4):
        raise ValueError(f"q must have 3 or 4 dimensions, got {len(shape)}")
    if layout == "bshd":
        seq, heads = shape[-3], shape[-2]
    elif layout == "bhsd":
        heads, seq = shape[-3], shape[-2]
    else:
        raise ValueError(f"layout must be 'bshd' or 'bhsd', got {layout!r}")
    return (*shape[:-3], heads, seq)


def _run(q, k, v, method, causal, scale, layout, return_lse, threads):
    """The operator's CPU and CUDA kernel: the plain call. Without return_lse the second
    output is an empty float32 tensor (an operator's outputs are fixed by its schema)."""
    from ._attention import run
    out, lse, _ = run(q, k, v, method, causal, scale, layout, return_lse, False, threads)
    if lse is None:
        lse = q.new_empty((0,), dtype=sys.modules["torch"].float32)
    return out, lse


def _fake(q, k, v, method, causal, scale, layout, return_lse, threads):
    """What torch.compile traces with: outputs shaped as _run's, nothing computed. The output is
    contiguous in q's shape, as the plain call allocates it."""
    f32 = sys.modules["torch"].float32
    lse = q.new_empty(lse_shape(q.shape, layout) if return_lse else (0,), dtype=f32)
    return q.new_empty(q.shape), lse
