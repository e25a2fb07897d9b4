"""numpy arrays and torch tensors as the extension reads them.

numpy has no bfloat16, so torch bfloat16 tensors cross as int16 views of the same memory
(tag "bf16"); every other supported tensor crosses as its zero-copy numpy view. Nothing here
copies: the extension reads the buffers in place through their strides.
"""
import sys

import numpy as np

_DTYPE_NAMES = {"float32": "float32", "f32": "float32", "float16": "float16", "f16": "float16",
                "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _torch():
    # Only tensors of a torch the caller imported can reach us: never import it ourselves.
    return sys.modules.get("torch")


def unwrap(x, name):
    """Returns (numpy view, tag, torch dtype or None) for one argument."""
    if type(x) is np.ndarray:
        return x, "", None
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: tensor is on device '{x.device}'; spattn runs on the CPU "
                             f"(move it with .cpu())")
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy(), "bf16", x.dtype
        if x.dtype in (torch.float32, torch.float16):
            return x.numpy(), "", x.dtype
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; pass float32, float16 or "
                        f"bfloat16")
    if isinstance(x, np.ndarray):
        return x, "", None
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")


def unwrap_qkv(q, k, v):
    """(q, k, v numpy views, tag, torch dtype or None); q, k and v must share one dtype."""
    qa, qt, qd = unwrap(q, "q")
    ka, kt, kd = unwrap(k, "k")
    va, vt, vd = unwrap(v, "v")
    if not (qt == kt == vt and qd == kd == vd and qa.dtype == ka.dtype == va.dtype):
        raise TypeError(f"q, k, v dtypes must match (q {dtype_name(q)}, k {dtype_name(k)}, "
                        f"v {dtype_name(v)})")
    return qa, ka, va, qt, qd


def dtype_name(x):
    d = getattr(x, "dtype", None)
    return str(d).replace("torch.", "") if d is not None else type(x).__name__


def wrap(array, tag, torch_dtype):
    """The inverse of unwrap for arrays the extension made: a torch tensor when the inputs were
    torch tensors (or the data is bfloat16), else the numpy array."""
    if tag == "bf16" or torch_dtype is not None:
        torch = _torch()
        if torch is None:
            import torch  # bfloat16 data has no numpy form
        t = torch.from_numpy(array)
        return t.view(torch.bfloat16) if tag == "bf16" else t
    return array


def from_core(array, dtype, as_torch):
    """An array the extension made, with its dtype name ("f32", "f16", "bf16"): a torch tensor
    sharing its memory when as_torch (or for bfloat16, which numpy lacks), else the array."""
    if dtype != "bf16" and not as_torch:
        return array
    torch = _torch()
    if torch is None:
        try:
            import torch
        except ImportError:
            raise ValueError("bfloat16 data needs torch (numpy has no bfloat16): install "
                             "python3-torch, or ask for float32 or float16") from None
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if dtype == "bf16" else t


def normalize_dtype(dtype):
    """'float32' | 'float16' | 'bfloat16' from a name, a numpy dtype or a torch dtype."""
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPE_NAMES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    return _DTYPE_NAMES[name]


def to_layout(array_hsd, layout):
    """A [heads, seq, dim] array as the caller's layout without a batch axis ('bshd' gives the
    [seq, heads, dim] view)."""
    if layout == "bshd":
        return array_hsd.transpose(1, 0, 2)
    if layout == "bhsd":
        return array_hsd
    raise ValueError(f"layout must be 'bshd' or 'bhsd', got {layout!r}")
