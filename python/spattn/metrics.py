"""Metrics that judge a sparse method against exact attention (the library's, as `spattn
bench` reports them). Each takes one sequence: no batch axis, or a batch of 1."""
from . import _core
from ._arrays import unwrap, unwrap_qkv


def recall(q, k, v, method, *, causal=True, layout="bshd", threads=None, max_rows=256):
    """Attention recall of `method`: per row, the share of the exact softmax mass held by the
    score entries the method computed. Returns {"mean", "worst", "rows"} over every row, or
    max_rows evenly spaced rows per head (always the first and last)."""
    qa, ka, va, tag, _ = unwrap_qkv(q, k, v)
    return _core.recall(qa, ka, va, tag, method, causal, layout, threads or 0, max_rows)


def output_error(out, ref, *, layout="bshd"):
    """{"rel_l2", "cosine_min", "cosine_mean", "max_abs"} of out against ref (same shape)."""
    oa, ot, _ = unwrap(out, "out")
    ra, rt, _ = unwrap(ref, "ref")
    return _core.output_error(oa, ra, ot, rt, layout)


def rel_l2(out, ref, *, layout="bshd"):
    """||out - ref||_2 / ||ref||_2 over all elements."""
    return output_error(out, ref, layout=layout)["rel_l2"]


def cosine_min(out, ref, *, layout="bshd"):
    """The worst row's cosine similarity between out and ref."""
    return output_error(out, ref, layout=layout)["cosine_min"]


def oracle_mass(q, k, v, *, head=0, budget=0.1, block_q=64, block_k=64, causal=True,
                layout="bshd", threads=None):
    """The softmax mass the best possible block mask keeps with `budget` (a fraction of each
    query block's causal key blocks, at least one) for one q head: the ceiling any block-sparse
    method with that budget can reach."""
    qa, ka, va, tag, _ = unwrap_qkv(q, k, v)
    return _core.oracle_mass(qa, ka, va, tag, head, budget, block_q, block_k, causal, layout,
                             threads or 0)
