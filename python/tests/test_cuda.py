"""spattn.attention on torch CUDA tensors: the GPU path, no host round trip. Results against a
float64 reference and against spattn on the CPU; outputs on the inputs' device; bad input as
ValueError/TypeError. The GPU tests skip without torch with CUDA and a spattn built with CUDA;
the binding's refusals without a GPU run everywhere."""
import numpy as np
import pytest

import spattn
from conftest import reference_attention
from spattn import _core


def _torch_with_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


torch = _torch_with_cuda()
gpu = pytest.mark.skipif(torch is None or not _core.cuda_built(),
                         reason="needs torch with CUDA and a spattn built with CUDA")

# A fake device tensor for the binding alone: (data_ptr, shape, strides).
_ARG = (4096, [2, 8, 64], [512, 64, 1])


def _call(dtype="bf16", method="dense", arg=_ARG):
    return _core.cuda_attention(arg, arg, arg, arg, 0, dtype, 0, 0, method, True, None, "bhsd",
                                None, False)


def test_binding_refuses_without_a_gpu():
    if _core.cuda_device_count() > 0:
        pytest.skip("a GPU is present: the GPU tests below cover it")
    msg = "no CUDA device" if _core.cuda_built() else "built without CUDA"
    with pytest.raises(ValueError, match=msg):
        _call()


def test_binding_checks_before_the_device():
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        _call(dtype="f32")
    with pytest.raises(ValueError, match="rank 4"):
        _call(arg=(4096, [8, 64], [64, 1]))
    with pytest.raises(ValueError, match="unknown method|nosuch"):
        _call(method="nosuch")


def _problem(seq, heads, kv_heads, dim, dtype, seed=3, kind="text"):
    """CPU float32 tensors [seq, heads, dim] rounded to dtype, and their CUDA copies."""
    w = spattn.workload(kind, seq=seq, heads=heads, kv_heads=kv_heads, dim=dim, seed=seed,
                        as_torch=True)
    host = [x.to(dtype) for x in (w.q, w.k, w.v)]
    return host, [x.cuda() for x in host]


def _tol(dtype):
    return 2e-2 if dtype == torch.bfloat16 else 3e-3


def _hsd(x):
    """[seq, heads, dim] torch tensor (any device or dtype) as a float64-ready numpy array."""
    return x.float().permute(1, 0, 2).cpu().numpy()


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_dense_matches_the_float64_reference(dtype, dim, causal):
    td = getattr(torch, dtype)
    host, (q, k, v) = _problem(333, 4, 2, dim, td)
    out, lse, report = spattn.attention(q, k, v, causal=causal, return_lse=True,
                                        return_report=True)
    assert out.is_cuda and out.device == q.device and out.dtype == td and out.shape == q.shape
    assert lse.is_cuda and lse.device == q.device and lse.dtype == torch.float32
    assert lse.shape == (4, 333)
    ref, ref_lse = reference_attention(*(_hsd(x) for x in host), causal=causal)
    tol = _tol(td) * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(_hsd(out), ref, atol=tol, rtol=0)
    np.testing.assert_allclose(lse.cpu().numpy(), ref_lse, atol=2e-3, rtol=2e-3)
    assert report["sparsity"] == 0.0 and report["flops"] > 0


@gpu
def test_batched_bhsd_strided_views_and_scale():
    # [batch, heads, seq, dim] as strided views of bshd storage: read in place.
    hosts, devs = zip(*(_problem(200, 8, 2, 64, torch.bfloat16, seed=s) for s in (1, 2)))
    q, k, v = (torch.stack([d[i] for d in devs]).permute(0, 2, 1, 3) for i in range(3))
    assert not q.is_contiguous()
    out, lse = spattn.attention(q, k, v, layout="bhsd", scale=0.1, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 8, 200)
    for b, host in enumerate(hosts):
        ref, ref_lse = reference_attention(*(_hsd(x) for x in host), scale=0.1)
        np.testing.assert_allclose(out[b].float().cpu().numpy(), ref, atol=2e-2, rtol=0)
        np.testing.assert_allclose(lse[b].cpu().numpy(), ref_lse, atol=2e-3, rtol=2e-3)


@gpu
@pytest.mark.parametrize("method", ["blasst:lambda=0.01",
                                    "a_shape:sink=64,local=256",
                                    "momo:gamma=16,k=8",
                                    "xattention:dot=f32,min_share=0.3",
                                    "mean_pool:topk=3",
                                    "flexprefill:min_budget=256"])
def test_sparse_methods_match_spattn_on_the_cpu(method):
    host, dev = _problem(1100, 4, 2, 128, torch.bfloat16, seed=5)
    out, lse, rep = spattn.attention(*dev, method=method, return_lse=True, return_report=True)
    cpu_out, cpu_lse, cpu_rep = spattn.attention(*host, method=method, return_lse=True,
                                                 return_report=True)
    assert out.is_cuda and not cpu_out.is_cuda
    scale = max(1.0, cpu_out.float().abs().max().item())
    np.testing.assert_allclose(out.float().cpu().numpy(), cpu_out.float().numpy(),
                               atol=2e-2 * scale, rtol=0)
    np.testing.assert_allclose(lse.cpu().numpy(), cpu_lse.numpy(), atol=2e-2, rtol=0)
    if method.startswith(("momo", "xattention", "mean_pool", "flexprefill")):
        # The same selections on both devices (a tie within rounding may flip a block).
        same = np.mean(np.asarray(rep["mask"]) == np.asarray(cpu_rep["mask"]))
        assert same > 0.99 and rep["sparsity"] > 0.1
        if not method.startswith("momo"):
            assert rep["extras"]["mask_device"] == 1  # estimated on the device
    elif method.startswith("a_shape"):
        assert rep["sparsity"] > 0.1
        np.testing.assert_array_equal(rep["mask"], cpu_rep["mask"])
        assert rep["score_entries"] == cpu_rep["score_entries"]
    else:
        # Skip decisions may differ where a margin sits within bf16 rounding of the threshold.
        got, want = rep["extras"]["skipped_fraction"], cpu_rep["extras"]["skipped_fraction"]
        assert want > 0 and abs(got - want) < 0.02


@gpu
def test_runs_on_q_device_and_torch_current_stream():
    n = torch.cuda.device_count()
    host, _ = _problem(256, 4, 4, 64, torch.float16)
    ref, _ = reference_attention(*(_hsd(x) for x in host))
    # The last device, whatever is current: the output lands there.
    dev = torch.device("cuda", n - 1)
    q, k, v = (x.to(dev) for x in host)
    s = torch.cuda.Stream(dev)
    with torch.cuda.device(0), torch.cuda.stream(s):
        out = spattn.attention(q, k, v)
    s.synchronize()
    assert out.device == dev
    np.testing.assert_allclose(_hsd(out), ref, atol=3e-3 * max(1.0, np.abs(ref).max()), rtol=0)
    # Work queued before on the same side stream is seen (no host sync in between).
    with torch.cuda.stream(s):
        q2 = q * 2
        out2 = spattn.attention(q2, k, v, scale=0.0625)
    s.synchronize()
    np.testing.assert_allclose(_hsd(out2), ref, atol=3e-3 * max(1.0, np.abs(ref).max()), rtol=0)


@gpu
def test_bad_cuda_input():
    host, (q, k, v) = _problem(128, 2, 2, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="one device"):
        spattn.attention(q, host[1], v)
    with pytest.raises(ValueError, match="one device"):
        spattn.attention(host[0], k, v)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        spattn.attention(q.float(), k.float(), v.float())
    with pytest.raises(TypeError, match="dtypes must match"):
        spattn.attention(q, k.half(), v)
    with pytest.raises(TypeError, match="torch tensor"):
        spattn.attention(q, k.cpu().float().numpy(), v)
    q96, k96, v96 = (torch.zeros(128, 2, 96, dtype=torch.bfloat16, device=q.device)
                     for _ in range(3))
    with pytest.raises(ValueError, match="head dim 64 or 128"):
        spattn.attention(q96, k96, v96)
    with pytest.raises(ValueError, match="chunked_h2o: no GPU path yet"):
        spattn.attention(q, k, v, method="chunked_h2o")
    with pytest.raises(ValueError, match="layout"):
        spattn.attention(q, k, v, layout="sbhd")
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="one device"):
            spattn.attention(q, k.to("cuda:1"), v)


@pytest.mark.skipif(torch is None or _core.cuda_built(),
                    reason="needs torch with CUDA and a spattn built without CUDA")
def test_spattn_without_cuda_says_so():
    q = torch.zeros(64, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="built without CUDA"):
        spattn.attention(q, q, q)
