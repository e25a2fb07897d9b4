"""spattn.attention over numpy arrays: layouts, batches, strided views, dtypes, LSE, GQA,
decode-length queries, no copies of the inputs, and two Python threads at once."""
import threading
import tracemalloc

import numpy as np
import pytest

import spattn
from conftest import reference_attention


def test_dense_matches_the_float64_reference(small):
    q, k, v = small
    out, lse = spattn.attention(q, k, v, layout="bhsd", return_lse=True)
    ref, ref_lse = reference_attention(q, k, v)
    assert out.dtype == np.float32 and out.shape == q.shape
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_non_causal_and_custom_scale(small, causal):
    q, k, v = small
    out, lse = spattn.attention(q, k, v, layout="bhsd", causal=causal, scale=0.05,
                                return_lse=True)
    ref, ref_lse = reference_attention(q, k, v, causal=causal, scale=0.05)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


def test_layouts_and_batch_give_the_same_answer(small):
    q, k, v = small
    hsd = spattn.attention(q, k, v, layout="bhsd")
    # [seq, heads, dim]: contiguous copies in flash-attn's order.
    shd = [np.ascontiguousarray(x.transpose(1, 0, 2)) for x in (q, k, v)]
    out = spattn.attention(*shd)
    assert out.shape == shd[0].shape
    np.testing.assert_array_equal(out.transpose(1, 0, 2), hsd)
    # Batched in both layouts: two sequences, the second one negated.
    for layout, xs in (("bshd", shd), ("bhsd", (q, k, v))):
        batch = [np.ascontiguousarray(np.stack([x, -x])) for x in xs]
        outb = spattn.attention(*batch, layout=layout)
        assert outb.shape == batch[0].shape
        first = outb[0] if layout == "bhsd" else outb[0].transpose(1, 0, 2)
        np.testing.assert_array_equal(first, hsd)
        second = spattn.attention(*[b[1] for b in batch], layout=layout)
        np.testing.assert_array_equal(outb[1], second)


def test_strided_views_read_in_place(small):
    q, k, v = small
    want = spattn.attention(q, k, v, layout="bhsd")
    # A transposed view (bhsd arrays read as bshd) and a slice of a wider buffer.
    t = [x.transpose(1, 0, 2) for x in (q, k, v)]
    assert not t[0].flags.c_contiguous
    np.testing.assert_array_equal(spattn.attention(*t).transpose(1, 0, 2), want)
    wide = [np.concatenate([x, np.zeros_like(x)], axis=2)[:, :, : x.shape[2]] for x in (q, k, v)]
    assert not wide[0].flags.c_contiguous
    np.testing.assert_array_equal(spattn.attention(*wide, layout="bhsd"), want)
    # Every other head of a buffer twice as wide in heads.
    every_other = [np.repeat(x, 2, axis=0)[::2] for x in (q, k, v)]
    np.testing.assert_array_equal(spattn.attention(*every_other, layout="bhsd"), want)
    # Negative strides are read through a copy, with the same answer.
    flipped = [x[::-1][::-1] for x in (q, k, v)]
    np.testing.assert_array_equal(spattn.attention(*flipped, layout="bhsd"), want)
    rev = [np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1] for x in (q, k, v)]
    assert rev[0].strides[2] < 0
    np.testing.assert_array_equal(spattn.attention(*rev, layout="bhsd"), want)


def traced_peak(fn):
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_inputs_are_not_copied():
    # numpy reports its buffers to tracemalloc: a copy of q, k or v would add its size to the
    # peak; the output (the size of q) is the only array the call allocates.
    w = spattn.workload("random", seq=1024, heads=4, dim=128, layout="bhsd")
    q, k, v = (np.ascontiguousarray(x) for x in w)
    nbytes = q.nbytes
    for xs, layout in (((q, k, v), "bhsd"), ([x.transpose(1, 0, 2) for x in (q, k, v)], "bshd")):
        peak = traced_peak(lambda: spattn.attention(*xs, layout=layout))
        assert peak < 1.5 * nbytes, (layout, peak, nbytes)
    # The measurement sees copies: negative strides are copied, and the peak shows it.
    rev = [x[:, ::-1] for x in (q, k, v)]
    assert traced_peak(lambda: spattn.attention(*rev, layout="bhsd", causal=False)) > 3 * nbytes


def test_float16_round_trip(small):
    q, k, v = (x.astype(np.float16) for x in small)
    out, lse = spattn.attention(q, k, v, layout="bhsd", return_lse=True)
    assert out.dtype == np.float16
    ref, ref_lse = reference_attention(q, k, v)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=2e-3, rtol=1e-2)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=1e-4)


def test_gqa_mqa_and_decode_queries():
    w = spattn.workload("text", seq=300, heads=8, kv_heads=1, dim=32, layout="bhsd", seed=1)
    q, k, v = (np.ascontiguousarray(x) for x in w)
    ref, ref_lse = reference_attention(q, k, v)
    out, lse = spattn.attention(q, k, v, layout="bhsd", return_lse=True)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-4)
    # q_len < kv_len: the last queries, aligned bottom-right (decode kernels below 17 rows).
    for n in (1, 5, 40):
        qd = np.ascontiguousarray(q[:, -n:])
        outd, lsed, rep = spattn.attention(qd, k, v, layout="bhsd", return_lse=True,
                                           return_report=True)
        np.testing.assert_allclose(outd, ref[:, -n:], atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lsed, ref_lse[:, -n:], atol=1e-4, rtol=1e-5)
        assert rep["path"] == ("decode" if n <= 16 else "prefill")


def test_report_holds_what_the_run_did(small):
    q, k, v = small
    _, rep = spattn.attention(q, k, v, layout="bhsd", method="blasst:lambda=0.01",
                              return_report=True)
    assert rep["method"] == "blasst:lambda=0.01"
    assert 0 < rep["sparsity"] < 1 and rep["score_entries"] < rep["causal_entries"]
    assert rep["flops"] == 4 * 64 * rep["score_entries"]
    assert len(rep["per_head"]["head_skipped"]) == 4 and rep["mask"] is None
    assert rep["extras"]["lambda"] == pytest.approx(0.01)
    _, rep = spattn.attention(q, k, v, layout="bhsd", method="a_shape:sink=64,local=1",
                              return_report=True)
    mask = rep["mask"]
    assert mask.dtype == np.bool_ and mask.shape == (4, 4, 4)
    # sink and local blocks only (a local window of one key): the diagonal and column 0.
    want = np.zeros((4, 4), bool)
    want[:, 0] = True
    want[np.arange(4), np.arange(4)] = True
    assert (mask == want).all()
    np.testing.assert_array_equal(spattn.block_mask(q, k, v, "a_shape:sink=64,local=1",
                                                    layout="bhsd"), mask)
    # Batched inputs: one report per batch element.
    b = [np.stack([x, x]) for x in small]
    _, reps = spattn.attention(*b, layout="bhsd", method="a_shape", return_report=True)
    assert isinstance(reps, list) and len(reps) == 2 and reps[0]["sparsity"] == reps[1]["sparsity"]
    assert spattn.block_mask(*b, "a_shape", layout="bhsd").shape == (2, 4, 4, 4)


def test_mass_budgets_by_spec():
    # xattention and mean_pool's topp are reached by spec like every method: a larger budget
    # keeps at least the blocks of a smaller one's count, and topp=1 keeps every causal block.
    w = spattn.workload("text", seq=1024, heads=2, dim=64, layout="bhsd", seed=3)
    counts = [spattn.block_mask(*w, f"mean_pool:topp={p}", layout="bhsd").sum() for p in (0.5, 0.9, 1)]
    assert counts[0] <= counts[1] <= counts[2] == 2 * 16 * 17 // 2
    x = spattn.block_mask(*w, "xattention", layout="bhsd")
    assert x.shape == (2, 8, 8)  # the paper's blocks of 128
    assert np.all(x[:, :, 0]) and np.all(x[:, np.arange(8), np.arange(8)])  # sink, diagonal
    assert np.array_equal(x, spattn.block_mask(*w, "xattention:topp=0.9", layout="bhsd"))
    # momo's topp: a larger mass keeps at least the blocks of a smaller one; the catalog names
    # each method's count, the twin a topp budget is compared with.
    m = [spattn.block_mask(*w, f"momo:topp={p},gamma=32", layout="bhsd").sum() for p in (0.5, 0.99)]
    assert 0 < m[0] <= m[1]
    counts = {c["name"]: c["count_param"] for c in spattn.method_catalog() if c["count_param"]}
    assert counts == {"mean_pool": "topk", "oracle_topk": "topk", "momo": "k_trim"}


def test_flexprefill_by_spec():
    # flexprefill is reached by spec like every method; its report names each head's pattern.
    w = spattn.workload("text", seq=1024, heads=2, dim=64, layout="bhsd", seed=3)
    x = spattn.block_mask(*w, "flexprefill", layout="bhsd")
    assert x.shape == (2, 8, 8)  # the paper's blocks of 128
    assert np.all(x[:, :, 0]) and np.all(x[:, np.arange(8), np.arange(8)])  # sink, diagonal
    assert np.array_equal(x, spattn.block_mask(*w, "flexprefill:topp=0.9", layout="bhsd"))
    _, rep = spattn.attention(*w, layout="bhsd", method="flexprefill:min_budget=0",
                              return_report=True)
    assert set(rep["per_head"]["query_aware"]) <= {0.0, 1.0}
    assert len(rep["per_head"]["js_distance"]) == 2
    assert rep["extras"]["gamma"] == 0.9 and rep["extras"]["tau"] == 0.1
    # tau = 1 makes every head query-aware (the distance is at most sqrt(ln 2)), tau = 0 none.
    _, all_qa = spattn.attention(*w, layout="bhsd", method="flexprefill:tau=1", return_report=True)
    _, no_qa = spattn.attention(*w, layout="bhsd", method="flexprefill:tau=0", return_report=True)
    assert all_qa["extras"]["query_aware_heads"] == 2 and no_qa["extras"]["query_aware_heads"] == 0


def test_two_python_threads_at_once(small):
    q, k, v = small
    methods = ["dense", "blasst:lambda=1e-3", "vertical_slash", "mean_pool"]
    want = {m: spattn.attention(q, k, v, layout="bhsd", method=m) for m in methods}
    errors = []

    def worker(m):
        try:
            for _ in range(5):
                np.testing.assert_array_equal(
                    spattn.attention(q, k, v, layout="bhsd", method=m, threads=1), want[m])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(m,)) for m in methods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_the_gil_is_released_while_kernels_run():
    # A Python thread counts while attention runs in this one: with the GIL held by the call,
    # it would stall; released, it counts at a good part of the rate it reaches while this
    # thread sleeps.
    import time
    w = spattn.workload("random", seq=2048, heads=4, dim=128, layout="bhsd")
    done = threading.Event()
    ticks = [0]

    def count():
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        def rate(fn):
            t0, n0 = time.perf_counter(), ticks[0]
            fn()
            return (ticks[0] - n0) / (time.perf_counter() - t0)
        idle = rate(lambda: time.sleep(0.3))
        busy = rate(lambda: [spattn.attention(*w, layout="bhsd", threads=1) for _ in range(3)])
    finally:
        done.set()
        t.join()
    assert busy > 0.1 * idle, (busy, idle)
