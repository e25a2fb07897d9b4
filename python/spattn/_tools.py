"""The command line's tools as functions: generated workloads, Q/K/V files, the bench records."""
import json
from dataclasses import dataclass, field

from . import _core
from ._arrays import from_core, normalize_dtype, to_layout, unwrap_qkv


@dataclass
class Workload:
    """A generated workload: q [q_len, heads, dim], k and v [seq, kv_heads, dim] in layout
    "bshd" (views of [heads, seq, dim] buffers; "bhsd" gives those), and the ground truth the
    generator planted (sink_tokens, local_window, verticals, slashes, needles, ...)."""
    q: object
    k: object
    v: object
    layout: str
    dtype: str
    meta: dict = field(default_factory=dict)

    def __iter__(self):  # q, k, v = spattn.workload(...)
        return iter((self.q, self.k, self.v))


def workload(kind="text", seq=4096, heads=2, kv_heads=None, dim=128, dtype="float32", seed=0,
             *, q_len=0, layout="bshd", as_torch=False):
    """A seeded long-context workload with real RoPE and planted structure, as `spattn bench
    --workload KIND` makes it. kind: random, text, video, mixed. q_len: queries are the last
    q_len positions (0: all). Arrays are numpy (bfloat16, or as_torch=True: torch tensors)."""
    d = _core.workload(kind, seq, heads, kv_heads or 0, dim, normalize_dtype(dtype), seed, q_len)
    arrays = [from_core(to_layout(d.pop(n), layout), d["dtype"], as_torch) for n in "qkv"]
    return Workload(*arrays, layout=layout, dtype=normalize_dtype(d.pop("dtype")), meta=d)


def load_qkv(path, *, file_layout="hsd", layout="bshd", as_torch=False):
    """q, k, v from a .safetensors file holding tensors q, k, v, or q.npy, k.npy, v.npy in a
    directory or under a prefix (as `spattn bench --qkv`). file_layout: how the files' rank-3
    arrays are ordered ("hsd" or "shd"). Returned in `layout` without a batch axis."""
    d = _core.load_qkv(str(path), file_layout)
    return tuple(from_core(to_layout(d[n], layout), d["dtype"], as_torch) for n in "qkv")


def save_qkv(path, q, k, v, *, layout="bshd"):
    """Writes q, k, v (one sequence) where load_qkv reads them: a path ending in .safetensors,
    an existing directory, or a prefix. Files hold [heads, seq, dim]."""
    qa, ka, va, tag, _ = unwrap_qkv(q, k, v)
    _core.save_qkv(str(path), qa, ka, va, tag, layout)


def bench(q=None, k=None, v=None, *, methods=None, workload="text", seq=16384, heads=2,
          kv_heads=None, dim=128, dtype="float32", seed=0, q_len=0, causal=True, repeat=3,
          threads=None, layout="bshd", bf16_path="auto"):
    """The record `spattn bench --json` prints, as a dict: dense and each method (spec strings;
    None: every method at its paper defaults) timed round-robin on one problem, with speedup,
    sparsity, recall and output error per method under "results". The problem is q, k, v
    (one sequence, in `layout`) when given, else a generated workload."""
    source = ""
    if q is None:
        if k is not None or v is not None:
            raise ValueError("bench: give q, k and v together, or none for a generated workload")
        d = _core.workload(workload, seq, heads, kv_heads or 0, dim, normalize_dtype(dtype),
                           seed, q_len)
        q, k, v, layout, source = d["q"], d["k"], d["v"], "bhsd", workload
        tag = "bf16" if d["dtype"] == "bf16" else ""
    else:
        q, k, v, tag, _ = unwrap_qkv(q, k, v)
    specs = [methods] if isinstance(methods, str) else list(methods or [])
    text = _core.bench(q, k, v, tag, layout, specs, causal, repeat, threads or 0, bf16_path,
                       source, seed)
    return json.loads(text)
