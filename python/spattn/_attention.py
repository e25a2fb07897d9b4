"""spattn.attention and spattn.block_mask: a method run over q, k, v read in place."""
from . import _core, _cuda, _torch_op
from ._arrays import unwrap_qkv, wrap


def attention(q, k, v, *, method="dense", causal=True, scale=None, layout="bshd",
              return_lse=False, return_report=False, threads=None):
    """Attention by one of spattn's methods.

    q, k, v: numpy arrays (float32, float16) or CPU torch tensors (float32, float16, bfloat16),
    shaped [batch, seq, heads, dim] (layout="bshd", flash-attn's) or [batch, heads, seq, dim]
    (layout="bhsd"), or the same without the batch axis. k and v may have fewer heads than q
    (GQA/MQA: q heads a multiple of kv heads). Causal attention aligns bottom-right: with
    q_len <= kv_len, query row i sits at position kv_len - q_len + i. torch CUDA tensors
    (bfloat16 or float16, head dim 64 or 128, all on one device) run the method's GPU path on
    that device and torch's current stream, with no host round trip; out and lse come back on
    q's device. A method without a GPU path raises ValueError saying so.

    method: a spec string as on the command line, "name[:key=value,...]", e.g. "blasst:lambda=1e-3"
    or "blasst:sparsity=0.7,calib=calib.json"; spattn.method_catalog() lists the names.
    scale: softmax scale (None: 1/sqrt(dim)). threads: worker threads (None: all).

    Returns the output in q's type and layout; with return_lse also the natural-log
    log-sum-exp of each row's scaled scores, float32 [batch, heads, q_len] (without batch:
    [heads, q_len]); with return_report also the run's report (a dict; a list of dicts, one per
    batch element, for batched inputs). Inputs are read in place through their strides; the
    GIL is released while the kernels run. Bad input raises ValueError or TypeError.

    With torch 2.1 or newer, torch tensors go through the custom operator
    torch.ops.spattn.attention (spattn._torch_op), so torch.compile traces this call without a
    graph break; return_report (a dict, which no operator returns) takes the plain call.
    """
    op = None if return_report else _torch_op.operator_for(q, k, v)
    if op is not None:
        # Inference only: no autograd formula, so no gradient is asked of one.
        out, lse = op(q.detach(), k.detach(), v.detach(), method, causal, scale, layout,
                      return_lse, threads)
        return (out, lse) if return_lse else out
    out, lse, report = run(q, k, v, method, causal, scale, layout, return_lse, return_report,
                           threads)
    if not (return_lse or return_report):
        return out
    return tuple([out] + ([lse] if return_lse else []) + ([report] if return_report else []))


def run(q, k, v, method, causal, scale, layout, return_lse, return_report, threads):
    """The plain call: (out, lse or None, report or None), on the CPU or (torch CUDA tensors)
    the GPU."""
    if _cuda.on_cuda(q, k, v):
        return _cuda.attention(q, k, v, method, causal, scale, layout, return_lse,
                               return_report, threads)
    qa, ka, va, tag, torch_dtype = unwrap_qkv(q, k, v)
    out = None
    out_array = None
    if torch_dtype is not None:
        import torch
        out = torch.empty(q.shape, dtype=torch_dtype)
        out_array = out.view(torch.int16).numpy() if tag == "bf16" else out.numpy()
    res, lse, report = _core.attention(qa, ka, va, tag, method, causal, scale, layout,
                                       return_lse, return_report, threads, out_array)
    if out is None:
        out = res
    return out, wrap(lse, "", torch_dtype) if return_lse else None, report


def block_mask(q, k, v, method, *, causal=True, layout="bshd", threads=None):
    """The block mask `method` computes with on q, k, v: a boolean numpy array
    [heads, query blocks, key blocks] ([batch, heads, ...] for batched inputs). Raises
    ValueError for methods that build no block mask (dense, blasst)."""
    _, report = attention(q, k, v, method=method, causal=causal, layout=layout,
                          return_report=True, threads=threads)
    reports = report if isinstance(report, list) else [report]
    for r in reports:
        if r["mask"] is None:
            raise ValueError(f"method '{method}' builds no block mask; use a mask-building "
                             f"method such as vertical_slash or a_shape")
    if isinstance(report, list):
        import numpy as np
        return np.stack([r["mask"] for r in reports])
    return report["mask"]


def method_catalog():
    """Every method the library knows, in order: dicts with name, default_spec (what a default
    comparison runs), evaluation_only, causal_only and count_param (the parameter that sets how
    many key blocks a query block keeps, the twin of a topp budget; "" where there is none)."""
    return _core.method_catalog()
