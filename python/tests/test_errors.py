"""Bad input raises ValueError or TypeError carrying spattn's message, never a crash."""
import numpy as np
import pytest

import spattn


@pytest.fixture
def qkv():
    w = spattn.workload("random", seq=128, heads=2, dim=64)
    return [np.ascontiguousarray(x) for x in w]


def test_wrong_ranks(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="q must have rank 4"):
        spattn.attention(q[0], k, v)
    with pytest.raises(ValueError, match="k must have rank 4"):
        spattn.attention(q, k[None, None], v)
    with pytest.raises(ValueError, match="batch axis or none"):
        spattn.attention(q[None], k, v)


def test_mismatched_shapes(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="head dims must match"):
        spattn.attention(q, k[:, :, :32], v)
    with pytest.raises(ValueError, match="k and v lengths must match"):
        spattn.attention(q, k, v[:64])
    with pytest.raises(ValueError, match="multiple of kv heads"):
        spattn.attention(np.concatenate([q, q[:, :1]], axis=1), k, v)
    with pytest.raises(ValueError, match="batch sizes must match"):
        spattn.attention(np.stack([q, q]), k[None], v[None])
    with pytest.raises(ValueError, match="head dim must be a multiple of 8"):
        spattn.attention(q[:, :, :12], k[:, :, :12], v[:, :, :12])
    with pytest.raises(ValueError, match="got 0"):
        spattn.attention(q[:0], k, v)


def test_mismatched_and_unsupported_dtypes(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match="dtypes must match"):
        spattn.attention(q, k.astype(np.float16), v)
    with pytest.raises(TypeError, match="float64 is not supported"):
        spattn.attention(*(x.astype(np.float64) for x in qkv))
    with pytest.raises(TypeError, match="int32 is not supported"):
        spattn.attention(*(x.astype(np.int32) for x in qkv))
    with pytest.raises(TypeError, match="expected a numpy array or a torch tensor, got list"):
        spattn.attention(q.tolist(), k, v)


def test_non_finite_values(qkv):
    q, k, v = (x.copy() for x in qkv)
    k[5, 1, 7] = np.nan
    with pytest.raises(ValueError, match=r"k holds a non-finite value \(nan\)"):
        spattn.attention(q, k, v)
    v[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        spattn.attention(q, qkv[1], v)


def test_unknown_methods_and_parameters(qkv):
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        spattn.attention(*qkv, method="nope")
    with pytest.raises(ValueError, match="'bogus'"):
        spattn.attention(*qkv, method="blasst:lambda=1e-3,bogus=1")
    with pytest.raises(ValueError, match="lambda"):
        spattn.attention(*qkv, method="blasst:lambda=-1")
    with pytest.raises(ValueError, match="not key=value"):
        spattn.attention(*qkv, method="a_shape:sink")
    with pytest.raises(ValueError, match="calib"):
        spattn.attention(*qkv, method="blasst:sparsity=0.5,calib=/nonexistent/c.json")


def test_bad_mass_budgets(qkv):
    for spec, name in [("xattention:tau=0", "tau"), ("xattention:tau=1.5", "tau"),
                       ("xattention:stride=3", "stride"), ("mean_pool:topp=0", "topp"),
                       ("mean_pool:topk=4,topp=0.5", "topp"), ("flexprefill:gamma=0", "gamma"),
                       ("flexprefill:gamma=1.2", "gamma"), ("flexprefill:tau=-0.5", "tau"),
                       ("flexprefill:tau=2", "tau")]:
        with pytest.raises(ValueError, match=name):
            spattn.attention(*qkv, method=spec)


def test_q_longer_than_kv(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"causal attention needs q_len <= kv_len \(128 > 64\)"):
        spattn.attention(q, k[:64], v[:64])
    # Non-causal attention takes any lengths.
    assert spattn.attention(q, k[:64], v[:64], causal=False).shape == q.shape


def test_bad_options(qkv):
    with pytest.raises(ValueError, match="layout must be 'bshd'"):
        spattn.attention(*qkv, layout="sbhd")
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        spattn.attention(*qkv, scale=float("nan"))
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        spattn.attention(*qkv, scale=0.0)
    with pytest.raises(ValueError, match="threads must be >= 0"):
        spattn.attention(*qkv, threads=-1)
    with pytest.raises(TypeError):
        spattn.attention(*qkv, method=3)


def test_tools_reject_bad_input(qkv, tmp_path):
    q, k, v = qkv
    with pytest.raises(ValueError, match="unknown workload"):
        spattn.workload("nope", seq=64)
    with pytest.raises(ValueError, match="dtype must be float32"):
        spattn.workload("text", seq=64, dtype="int8")
    with pytest.raises(ValueError, match="not found"):
        spattn.load_qkv(tmp_path / "missing_")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 12)
    with pytest.raises(ValueError, match="bad.safetensors"):
        spattn.load_qkv(bad)
    with pytest.raises(ValueError, match="one sequence"):
        spattn.metrics.recall(np.stack([q, q]), np.stack([k, k]), np.stack([v, v]), "a_shape")
    with pytest.raises(ValueError, match="head must be in"):
        spattn.metrics.oracle_mass(q, k, v, head=9)
    with pytest.raises(ValueError, match="builds no block mask"):
        spattn.block_mask(q, k, v, "dense")
    with pytest.raises(ValueError, match="--repeat"):
        spattn.bench(q, k, v, methods=["dense"], repeat=0)
    with pytest.raises(ValueError, match="unknown method"):
        spattn.bench(q, k, v, methods=["nope"])
    with pytest.raises(ValueError, match="--lengths"):
        spattn.calibrate(lengths=[])
    with pytest.raises(ValueError, match="alpha"):
        spattn.evaluate_calibration({"format": "spattn.blasst_calibration", "version": 1}, lengths=[256])
    with pytest.raises(TypeError, match="calibration"):
        spattn.evaluate_calibration(3)
