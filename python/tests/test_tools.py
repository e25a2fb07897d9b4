"""The tools as functions: workloads, files, metrics, calibration and bench records (the same
as `spattn bench --json`)."""
import json
import subprocess

import numpy as np
import pytest

import spattn
from conftest import program, reference_attention


def test_workload_arrays_and_ground_truth():
    w = spattn.workload("text", seq=512, heads=4, kv_heads=2, dim=64, seed=7)
    assert w.q.shape == (512, 4, 64) and w.k.shape == (512, 2, 64) and w.layout == "bshd"
    assert w.q.dtype == np.float32 and w.dtype == "float32"
    assert w.meta["kind"] == "text" and w.meta["sink_tokens"] > 0 and w.meta["needles"]
    assert w.meta["modality"].shape == (512,)
    again = spattn.workload("text", seq=512, heads=4, kv_heads=2, dim=64, seed=7, layout="bhsd")
    np.testing.assert_array_equal(again.q, w.q.transpose(1, 0, 2))
    other = spattn.workload("text", seq=512, heads=4, kv_heads=2, dim=64, seed=8)
    assert not np.array_equal(other.q, w.q)
    d = spattn.workload("video", seq=512, heads=2, dim=64, q_len=4)
    assert d.q.shape == (4, 2, 64) and d.k.shape == (512, 2, 64)
    assert spattn.workload("text", seq=64, heads=2, dim=64, dtype="float16").q.dtype == np.float16


@pytest.mark.parametrize("where", ["dir", "prefix_", "x.safetensors"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_save_and_load_qkv_round_trip(tmp_path, where, dtype):
    w = spattn.workload("random", seq=96, heads=4, kv_heads=2, dim=32, dtype=dtype)
    path = tmp_path if where == "dir" else tmp_path / where
    spattn.save_qkv(path, *w)
    for got, want in zip(spattn.load_qkv(path), w):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # As stored: [heads, seq, dim].
    q, _, _ = spattn.load_qkv(path, layout="bhsd")
    np.testing.assert_array_equal(q, w.q.transpose(1, 0, 2))


def test_metrics():
    w = spattn.workload("text", seq=512, heads=2, dim=64, seed=2)
    dense = spattn.metrics.recall(*w, "dense")
    assert dense["mean"] == pytest.approx(1.0) and dense["worst"] == pytest.approx(1.0)
    assert dense["rows"] == 2 * 256  # max_rows rows per head
    r = spattn.metrics.recall(*w, "a_shape:sink=64,local=64", max_rows=512)
    assert 0 < r["worst"] <= r["mean"] < 1 and r["rows"] == 1024
    assert spattn.metrics.recall(*w, "a_shape", max_rows=16)["rows"] == 32
    out = spattn.attention(*w)
    ref, _ = reference_attention(*(x.transpose(1, 0, 2) for x in w))
    ref = ref.transpose(1, 0, 2).astype(np.float32)
    assert spattn.metrics.rel_l2(out, out) == 0 and spattn.metrics.cosine_min(out, out) == pytest.approx(1.0)
    e = spattn.metrics.output_error(out, ref)
    assert 0 < e["rel_l2"] < 1e-5 and e["cosine_min"] > 0.99999 and e["max_abs"] < 1e-4
    sparse = spattn.attention(*w, method="a_shape:sink=64,local=64")
    assert spattn.metrics.rel_l2(sparse, ref) > 100 * e["rel_l2"]
    # float16 output against a float32 reference.
    assert spattn.metrics.rel_l2(out.astype(np.float16), ref) < 1e-3
    masses = [spattn.metrics.oracle_mass(*w, head=1, budget=b) for b in (0.1, 0.3, 1.0)]
    assert 0 < masses[0] <= masses[1] <= masses[2] and masses[2] == pytest.approx(1.0)


def test_calibrate_and_evaluate(tmp_path):
    path = tmp_path / "calib.json"
    c = spattn.calibrate(lengths=[1024, 2048], heads=2, samples=1, dim=64, out=path)
    assert c["alpha"] > 0 and c["beta"] > 0 and c["lengths"] == [1024, 2048]
    assert spattn.load_calibration(path)["alpha"] == c["alpha"]
    lam = spattn.lambda_for(c, 0.5, 2048)
    assert 0 < lam < 1 and spattn.lambda_for(path, 0.5, 2048) == lam
    # The calibration drives blasst from Python as from the command line.
    w = spattn.workload("text", seq=2048, heads=2, dim=64, seed=50)
    _, rep = spattn.attention(*w, method=f"blasst:sparsity=0.5,calib={path}",
                              return_report=True)
    assert rep["extras"]["lambda"] == pytest.approx(lam, rel=1e-6)
    e = spattn.evaluate_calibration(c, lengths=[1024, 2048], heads=2, dim=64, samples=2,
                                    targets=[0.5])
    assert len(e["sparsity"]) == 2 and len(e["sparsity"][0][0]) == 2
    assert all(abs(m[0] - 0.5) < 0.15 for m in e["mean"])
    # Calibrating on arrays the caller holds.
    arrays = [tuple(spattn.workload("text", seq=n, heads=2, dim=64)) for n in (1024, 2048)]
    c2 = spattn.calibrate(qkv=arrays)
    assert c2["source"] == "arrays" and c2["lengths"] == [1024, 2048]


def test_bench_records_match_the_command_line(tmp_path):
    cli = program("SPATTN_CLI")
    args = ["--workload", "text", "--seq", "512", "--heads", "2", "--dim", "64", "--seed", "4",
            "--repeat", "1", "--method", "a_shape", "--method", "blasst:lambda=1e-3", "--json"]
    r = subprocess.run([cli, "bench", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    got = spattn.bench(methods=["a_shape", "blasst:lambda=1e-3"], seq=512, heads=2, dim=64,
                       seed=4, repeat=1)
    assert got.keys() == want.keys()
    assert got["config"] == want["config"]
    assert [x["method"] for x in got["results"]] == ["dense", "a_shape", "blasst:lambda=1e-3"]
    for g, c in zip(got["results"], want["results"]):
        assert g.keys() == c.keys()
        for key in ("method", "sparsity", "score_entries", "recall", "recall_min", "rel_l2",
                    "path", "extras", "per_head"):
            assert g[key] == c[key], key
    # On arrays the caller holds: no workload in the config.
    w = spattn.workload("text", seq=512, heads=2, dim=64, seed=4)
    on_arrays = spattn.bench(*w, methods="a_shape", repeat=1)
    assert "workload" not in on_arrays["config"]
    assert on_arrays["results"][1]["recall"] == want["results"][1]["recall"]
    # No methods: every method of the catalog at its default spec.
    every = spattn.bench(seq=256, heads=2, dim=64, repeat=1)
    assert [x["method"] for x in every["results"]] == [m["default_spec"] for m in
                                                        spattn.method_catalog()]
