"""Shared fixtures: small problems, a float64 reference twin of attention, and the paths of the
C++ programs the tests compare against (set by ctest, the command line else the package's own;
tests that need one skip without it)."""
import os

import numpy as np
import pytest

import spattn
from spattn._cli import executable


def reference_attention(q, k, v, causal=True, scale=None):
    """Exact attention in float64 over [heads, seq, dim] arrays (GQA, bottom-right causal).
    Returns (out [Hq, Lq, d], lse [Hq, Lq])."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, lq, d = q.shape
    hkv, lk, _ = k.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    group = hq // hkv
    out = np.zeros((hq, lq, d))
    lse = np.zeros((hq, lq))
    for h in range(hq):
        s = scale * q[h] @ k[h // group].T
        if causal:
            pos = lk - lq + np.arange(lq)[:, None]
            s = np.where(np.arange(lk)[None, :] <= pos, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        z = p.sum(axis=1, keepdims=True)
        out[h] = (p / z) @ v[h // group]
        lse[h] = (m + np.log(z))[:, 0]
    return out, lse


@pytest.fixture(scope="session")
def small():
    """A text workload: 4 q heads over 2 kv heads, seq 256, dim 64, as [heads, seq, dim]."""
    w = spattn.workload("text", seq=256, heads=4, kv_heads=2, dim=64, seed=3, layout="bhsd")
    return np.ascontiguousarray(w.q), np.ascontiguousarray(w.k), np.ascontiguousarray(w.v)


def program(var):
    path = os.environ.get(var)
    if not path and var == "SPATTN_CLI":  # the command line the package carries, if built
        path = str(executable())
    if not path or not os.path.exists(path):
        pytest.skip(f"{var} not set (run through ctest)")
    return path
