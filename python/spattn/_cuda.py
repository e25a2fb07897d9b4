"""spattn.attention on torch CUDA tensors: the GPU path, with no host round trip.

The output (and lse) are allocated here with torch on q's device; the extension gets raw
device pointers, element strides and torch's current stream, and runs the method's GPU path
on that stream with q's device current. The extension neither links nor includes torch.
"""
from . import _core
from ._arrays import _torch

_TAGS = {"bfloat16": "bf16", "float16": "f16"}


def on_cuda(*xs):
    """Whether any argument is a torch tensor on a CUDA device."""
    torch = _torch()
    if torch is None:
        return False
    return any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in xs)


def _arg(x):
    return (x.data_ptr(), list(x.shape), list(x.stride()))


def _check(q, k, v):
    """The tag of q's dtype; raises for arguments that are not torch tensors on q's device or
    whose dtypes differ or are not bfloat16/float16."""
    torch = _torch()
    first = next(x for x in (q, k, v) if isinstance(x, torch.Tensor) and x.device.type == "cuda")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch tensor on {first.device} like the others, "
                            f"got {type(x).__name__}")
        if x.device != first.device:
            raise ValueError(f"q, k, v must be on one device: q on {q.device}, k on {k.device}, "
                             f"v on {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes must match (q {q.dtype}, k {k.dtype}, v {v.dtype})")
    tag = _TAGS.get(str(q.dtype).replace("torch.", ""))
    if tag is None:
        raise TypeError(f"q: dtype {q.dtype} is not supported on CUDA; pass bfloat16 or "
                        f"float16")
    return tag


def attention(q, k, v, method, causal, scale, layout, return_lse, return_report, threads):
    """(out, lse or None, report or None), all torch tensors on q's device but the report."""
    torch = _torch()
    tag = _check(q, k, v)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = None
    if return_lse and q.dim() in (3, 4):
        # [batch,] heads, q_len: contiguous, as the kernels write it per batch element.
        heads, seq = (q.shape[-2], q.shape[-3]) if layout == "bshd" else (q.shape[-3],
                                                                          q.shape[-2])
        lse = torch.empty(tuple(q.shape[:-3]) + (heads, seq), dtype=torch.float32,
                          device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        report = _core.cuda_attention(_arg(q), _arg(k), _arg(v), _arg(out),
                                      lse.data_ptr() if lse is not None else 0, tag,
                                      q.device.index, stream, method, causal, scale, layout,
                                      threads, return_report)
    return out, lse, report
