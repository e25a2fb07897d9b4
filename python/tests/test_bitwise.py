"""spattn.attention equals the C++ library bit for bit, for every method of the catalog:
the same inputs are written with save_qkv and run by a program that links only the library
(python/tests/run_method.cpp), while Python reads them in flash-attn's layout through strides."""
import json
import subprocess

import numpy as np
import pytest

import spattn
from conftest import program

CATALOG = [m["default_spec"] for m in spattn.method_catalog()]


def run_library(tmp_path, spec, causal):
    r = subprocess.run([program("SPATTN_RUN_METHOD"), str(tmp_path), spec, "1" if causal else "0"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "out.npy")
    lse = np.load(tmp_path / "lse.npy")[0]
    return out, lse, json.loads(r.stdout)


@pytest.mark.parametrize("spec", CATALOG)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_method_equals_the_library(tmp_path, spec, dtype):
    w = spattn.workload("text", seq=1024, heads=4, kv_heads=2, dim=64, dtype=dtype, seed=5)
    spattn.save_qkv(tmp_path, *w)  # [seq, heads, dim] views written as [heads, seq, dim]
    want, want_lse, counts = run_library(tmp_path, spec, True)
    out, lse, rep = spattn.attention(*w, method=spec, return_lse=True, return_report=True)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out.transpose(1, 0, 2), want)
    np.testing.assert_array_equal(lse, want_lse)
    for key in ("score_entries", "causal_entries", "tiles_visited", "tiles_skipped", "path",
                "extras", "per_head"):
        assert rep[key] == counts[key], key
    assert (rep["mask"].sum() if rep["mask"] is not None else -1) == counts["mask_blocks"]


@pytest.mark.parametrize("spec", [m["default_spec"] for m in spattn.method_catalog()
                                  if not m["causal_only"]])
def test_non_causal_methods_equal_the_library(tmp_path, spec):
    w = spattn.workload("text", seq=512, heads=2, dim=64, seed=6)
    spattn.save_qkv(tmp_path / "x_", *w)
    for name in ("q", "k", "v"):
        (tmp_path / f"x_{name}.npy").rename(tmp_path / f"{name}.npy")
    want, want_lse, _ = run_library(tmp_path, spec, False)
    out, lse = spattn.attention(*w, method=spec, causal=False, return_lse=True)
    np.testing.assert_array_equal(out.transpose(1, 0, 2), want)
    np.testing.assert_array_equal(lse, want_lse)


@pytest.mark.parametrize("spec", CATALOG)
def test_bfloat16_tensors_equal_the_library(tmp_path, spec):
    torch = pytest.importorskip("torch")
    w = spattn.workload("text", seq=512, heads=4, kv_heads=2, dim=64, dtype="bfloat16", seed=8)
    assert w.q.dtype == torch.bfloat16
    spattn.save_qkv(tmp_path, *w)
    want, want_lse, _ = run_library(tmp_path, spec, True)
    out, lse = spattn.attention(*w, method=spec, return_lse=True)
    assert out.dtype == torch.bfloat16
    bits = out.view(torch.int16).numpy().transpose(1, 0, 2)
    np.testing.assert_array_equal(bits, want.view(np.int16))
    np.testing.assert_array_equal(lse.numpy(), want_lse)
