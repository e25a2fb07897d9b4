"""torch tensors: read in place (float32, float16, bfloat16), results as torch tensors in the
input's dtype and layout; non-CPU tensors are refused. Skipped without torch."""
import numpy as np
import pytest

import spattn
from conftest import reference_attention

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tq():
    w = spattn.workload("text", seq=256, heads=4, kv_heads=2, dim=64, seed=9, as_torch=True)
    return w.q, w.k, w.v


def test_float32_tensors_match_numpy(tq):
    out, lse = spattn.attention(*tq, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.shape == tq[0].shape and isinstance(lse, torch.Tensor)
    np_out = spattn.attention(*(x.numpy() for x in tq))
    np.testing.assert_array_equal(out.numpy(), np_out)
    # bhsd views of the same tensors (strided), batched.
    b = [x.permute(1, 0, 2).unsqueeze(0) for x in tq]
    outb = spattn.attention(*b, layout="bhsd")
    assert outb.shape == b[0].shape
    np.testing.assert_array_equal(outb[0].permute(1, 0, 2).numpy(), np_out)


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("bfloat16", 2e-2)])
def test_half_precision_round_trips(tq, dtype, tol):
    td = getattr(torch, dtype)
    x = [t.to(td) for t in tq]
    out, lse = spattn.attention(*x, return_lse=True)
    assert out.dtype == td and out.shape == x[0].shape and lse.dtype == torch.float32
    ref, ref_lse = reference_attention(*(t.float().permute(1, 0, 2).numpy() for t in x))
    np.testing.assert_allclose(out.float().permute(1, 0, 2).numpy(), ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=1e-3, rtol=1e-4)
    # The same bits as the numpy path where numpy has the dtype.
    if dtype == "float16":
        np.testing.assert_array_equal(out.numpy(), spattn.attention(*(t.numpy() for t in x)))


def test_bfloat16_workloads_and_files(tmp_path):
    w = spattn.workload("text", seq=128, heads=2, dim=64, dtype="bfloat16")
    assert isinstance(w.q, torch.Tensor) and w.q.dtype == torch.bfloat16
    spattn.save_qkv(tmp_path, *w)
    for got, want in zip(spattn.load_qkv(tmp_path), w):
        assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_non_cpu_and_bad_tensors(tq):
    q, k, v = tq
    with pytest.raises(ValueError, match="device 'meta'"):
        spattn.attention(q.to("meta"), k, v)
    with pytest.raises(TypeError, match="int64 is not supported"):
        spattn.attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="dtypes must match"):
        spattn.attention(q, k.half(), v)
    with pytest.raises(TypeError, match="dtypes must match"):
        spattn.attention(q, k.numpy(), v)


def test_requires_grad_tensors_are_read(tq):
    q = tq[0].clone().requires_grad_(True)
    out = spattn.attention(q, tq[1], tq[2])
    assert not out.requires_grad and out.shape == q.shape
