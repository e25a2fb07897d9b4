#!/usr/bin/env python3
"""spattn's CUDA attention against PyTorch's SDPA backends in one process (issue 25).

Contenders, timed round-robin with CUDA events on the same inputs (bf16, causal, batch 1;
Llama-3-8B heads by default: 32 q heads, 8 kv heads, head dim 128):
  cudnn     torch SDPA, cuDNN backend
  flash     torch SDPA, flash backend (FlashAttention-2)
  dense     spattn dense
  bs10      spattn block-sparse over a random 64x64 block mask holding ~10% of the causal
            blocks (the diagonal block always), mask planned once (its planning time reported)
  bs10_128  the same with 128x128 blocks (128-row kernel tiles)
  full64/128  block-sparse over every causal block, 64- and 128-row tiles (the list's cost)
  qs16      spattn query-sparse over every 16th row and the last (MOMO's first pass)
  a_shape, mean_pool  the methods at the papers' defaults through the method API on device
            tensors: mask built on the host (its time reported), kernel timed from the plan
On the text workload also each method's recall: the mean over rows of the softmax mass it
computed, exp(lse_method - lse_dense).
  momo      (--momo-lens, --momo-specs) the whole method on the device through the method
            API, at 32K and 128K on random inputs and on the text workload, against cuDNN
            SDPA and spattn dense: time, density, recall
  blasst    spattn BLASST (local_first) at --blasst-lambda on the project's `text` workload
            (make_workload), with its skipped fraction; dense re-timed on the same inputs
  decode    one new query against --decode-lens caches of the text workload: torch SDPA
            (flash, cuDNN, efficient backends as they take it), spattn's split-K decode
            (dense) and BLASST's decode at --decode-lambda (V tiles of skipped blocks never
            read); K/V bytes read per second, the fraction of --hbm-gbps
Also checks spattn dense against the flash backend's output (max abs difference).

Needs torch with CUDA and libspattn_c.so (cmake build with the CUDA backend: build/lib).
Prints one JSON object per measurement and writes them all to --json.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class CTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("heads", ctypes.c_int64), ("seq", ctypes.c_int64),
                ("dim", ctypes.c_int64), ("stride_head", ctypes.c_int64),
                ("stride_seq", ctypes.c_int64)]


class CAttention(ctypes.Structure):
    _fields_ = [("form", ctypes.c_char_p), ("dtype", ctypes.c_int), ("q", CTensor),
                ("k", CTensor), ("v", CTensor), ("out", CTensor), ("lse", ctypes.c_void_p),
                ("causal", ctypes.c_int), ("scale", ctypes.c_float), ("lam", ctypes.c_double),
                ("local_first", ctypes.c_int), ("plan", ctypes.c_void_p),
                ("grid", ctypes.c_void_p), ("block_q", ctypes.c_int64),
                ("block_k", ctypes.c_int64), ("stream", ctypes.c_void_p),
                ("want_stats", ctypes.c_int), ("tiles_visited", ctypes.c_int64),
                ("tiles_skipped", ctypes.c_int64), ("score_entries", ctypes.c_int64),
                ("causal_entries", ctypes.c_int64), ("row_stride", ctypes.c_int64)]


class Spattn:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.spattn_c_cuda_attention.argtypes = [ctypes.POINTER(CAttention), ctypes.c_char_p,
                                                     ctypes.c_size_t]
        self.lib.spattn_c_cuda_plan_block_sparse.argtypes = [
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
            ctypes.c_size_t]
        self.lib.spattn_c_cuda_plan_free.argtypes = [ctypes.c_void_p]
        self.lib.spattn_c_cuda_plan_method.argtypes = [
            ctypes.c_char_p, ctypes.POINTER(CAttention), ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.spattn_c_cuda_method.argtypes = [ctypes.c_char_p, ctypes.POINTER(CAttention),
                                                  ctypes.c_char_p, ctypes.c_size_t]
        self.lib.spattn_c_workload_bf16.argtypes = [
            ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
            ctypes.c_size_t]
        self.err = ctypes.create_string_buffer(4096)

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self.err.value.decode())

    @staticmethod
    def _view(t):  # t: [1, heads, seq, dim] (any strides, dim contiguous)
        assert t.stride(3) == 1
        return CTensor(t.data_ptr(), t.shape[1], t.shape[2], t.shape[3], t.stride(1), t.stride(2))

    def args(self, form, q, k, v, out, lse=None, lam=0.0, local_first=False, plan=None,
             want_stats=False, row_stride=0):
        a = CAttention()
        a.form = form.encode()
        a.dtype = 0 if q.dtype == torch.bfloat16 else 1
        a.q, a.k, a.v, a.out = self._view(q), self._view(k), self._view(v), self._view(out)
        a.lse = lse.data_ptr() if lse is not None else None
        a.causal = 1
        a.lam = lam
        a.local_first = int(local_first)
        a.plan = plan
        a.stream = torch.cuda.current_stream().cuda_stream
        a.want_stats = int(want_stats)
        a.row_stride = row_stride
        return a

    def run(self, a):
        self._check(self.lib.spattn_c_cuda_attention(ctypes.byref(a), self.err, len(self.err)))
        return a

    def plan(self, grid, heads, q_len, kv_len, block):
        p = ctypes.c_void_p()
        g = grid.contiguous().cpu()
        self._check(self.lib.spattn_c_cuda_plan_block_sparse(
            g.data_ptr(), heads, q_len, kv_len, block, block, 1, ctypes.byref(p), self.err,
            len(self.err)))
        return p

    def plan_method(self, spec, a):
        """Runs a block-mask method once (mask on the host); its mask as a plan, the mask's
        host time in ms, and the entries it computed over the dense problem's."""
        p, ms = ctypes.c_void_p(), ctypes.c_double()
        self._check(self.lib.spattn_c_cuda_plan_method(spec.encode(), ctypes.byref(a),
                                                       ctypes.byref(p), ctypes.byref(ms),
                                                       self.err, len(self.err)))
        return p, ms.value, a.score_entries / a.causal_entries

    def method(self, spec, a):
        """Runs any method with a GPU path (make_method(spec)) on a's tensors, the whole
        method (momo: selection, mask, both passes, the report's read-back); fills a's stats."""
        self._check(self.lib.spattn_c_cuda_method(spec.encode(), ctypes.byref(a), self.err,
                                                  len(self.err)))
        return a

    def workload(self, kind, seq, heads, kv_heads, dim, seed):
        q = torch.empty((1, heads, seq, dim), dtype=torch.bfloat16)
        k = torch.empty((1, kv_heads, seq, dim), dtype=torch.bfloat16)
        v = torch.empty((1, kv_heads, seq, dim), dtype=torch.bfloat16)
        self._check(self.lib.spattn_c_workload_bf16(kind.encode(), seq, heads, kv_heads, dim,
                                                    seed, q.data_ptr(), k.data_ptr(),
                                                    v.data_ptr(), self.err, len(self.err)))
        return q.cuda(), k.cuda(), v.cuda()


def with_env(name, value, f):
    """f run with the environment variable name=value (read by the library at each launch)."""
    def g():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return f()
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    return g


# The wgmma kernel's FlashAttention-3 steps beside its plain form: the schedules
# (SPATTN_CUDA_KERNEL=wgmma_S) and TMA copies (SPATTN_CUDA_TMA=1), alone and together; a
# contender BASE_VARIANT runs BASE with the variant's environment. Longest names first, for
# variant_of.
VARIANTS = {
    "overlap_tma": {"SPATTN_CUDA_KERNEL": "wgmma_overlap", "SPATTN_CUDA_TMA": "1"},
    "pingpong_tma": {"SPATTN_CUDA_KERNEL": "wgmma_pingpong", "SPATTN_CUDA_TMA": "1"},
    "overlap": {"SPATTN_CUDA_KERNEL": "wgmma_overlap"},
    "pingpong": {"SPATTN_CUDA_KERNEL": "wgmma_pingpong"},
    "tma": {"SPATTN_CUDA_TMA": "1"},
}


def variant_of(name):
    """(base, variant) of a contender name, variant None where it is no VARIANTS row."""
    for v in VARIANTS:
        if name.endswith("_" + v):
            return name[:-len(v) - 1], v
    return name, None


def with_envs(envs, f):
    """f run with every variable of envs set."""
    for name, value in envs.items():
        f = with_env(name, value, f)
    return f


def with_kernel(kernel, f):
    """f run with SPATTN_CUDA_KERNEL=kernel."""
    return with_env("SPATTN_CUDA_KERNEL", kernel, f)


def with_variant(name, f):
    """f run as the named contender's variant: _mma (the mma.sync kernel), _64 (BLASST in
    64-row tiles, SPATTN_CUDA_BLASST_ROWS=64), or as is."""
    if name.endswith("_mma"):
        return with_kernel("mma", f)
    if name.endswith("_64"):
        return with_env("SPATTN_CUDA_BLASST_ROWS", "64", f)
    return f


def timed_round_robin(fns, reps, warmup):
    """fns: name -> callable. Median ms of each, interleaved rep by rep."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    times = {n: [] for n in fns}
    for _ in range(reps):
        for n, f in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            times[n].append(s.elapsed_time(e))
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


def sdpa_contenders(q, k, v, heads, kv_heads, names=("cudnn", "flash")):
    """torch's causal SDPA backends among names, with GQA where they take it, else over k, v
    expanded to q's heads: name -> (backend, k, v, enable_gqa), and name -> callable."""
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    gqa = {}
    for name in names:
        backend = backends[name]
        for enable_gqa in (True, False):
            kk = k if enable_gqa else k.repeat_interleave(heads // kv_heads, dim=1)
            vv = v if enable_gqa else v.repeat_interleave(heads // kv_heads, dim=1)
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, kk, vv, is_causal=True,
                                                   enable_gqa=enable_gqa)
                torch.cuda.synchronize()
                gqa[name] = (backend, kk, vv, enable_gqa)
                break
            except Exception as e:  # noqa: BLE001 - report and try the other form
                print(f"# {name} enable_gqa={enable_gqa}: {type(e).__name__}: {e}"[:300],
                      file=sys.stderr)

    def torch_fn(name):
        backend, kk, vv, eg = gqa[name]

        def f():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=eg)
        return f
    return gqa, {n: torch_fn(n) for n in gqa}


def causal_flops(heads, seq, dim):
    return 4.0 * dim * heads * seq * (seq + 1) / 2.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libspattn_c.so")
    ap.add_argument("--lens", default="8192,32768,131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--density", type=float, default=0.10)
    ap.add_argument("--blasst-len", type=int, default=32768)
    ap.add_argument("--blasst-lambda", default="0.001,0.01,0.05")
    ap.add_argument("--skip-blasst", action="store_true")
    ap.add_argument("--decode-lens", default="8192,32768,131072")
    ap.add_argument("--decode-lambda", default="0.001,0.01")
    ap.add_argument("--hbm-gbps", type=float, default=3350.0,
                    help="the GPU's memory bandwidth (H100 SXM: 3350 GB/s)")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--skip-prefill", action="store_true",
                    help="only BLASST's text workload and decode")
    ap.add_argument("--methods", default="a_shape,mean_pool",
                    help="block-mask methods timed through the method API")
    ap.add_argument("--momo-lens", default="32768,131072",
                    help="lengths of the momo rows: --momo-specs against cuDNN SDPA and spattn "
                         "dense on random inputs and on the text workload (recall on both)")
    ap.add_argument("--momo-specs", default="momo",
                    help="method specs timed whole through the method API (spattn_c_cuda_method)")
    ap.add_argument("--skip-momo", action="store_true")
    ap.add_argument("--also-fused", action="store_true",
                    help="also time each momo spec with its selection fused into the "
                         "query-sparse pass (SPATTN_CUDA_MOMO_FUSED=1) as SPEC_fused, with "
                         "vs_unfused against SPEC")
    ap.add_argument("--json", default="")
    ap.add_argument("--also-mma", action="store_true",
                    help="on a Hopper GPU also time the mma.sync kernel (SPATTN_CUDA_KERNEL=mma) "
                         "as dense_mma and blasst:LAMBDA_mma beside the default wgmma kernel")
    ap.add_argument("--also-schedules", action="store_true",
                    help="on a Hopper GPU also time the wgmma kernel's FlashAttention-3 steps "
                         "(SPATTN_CUDA_KERNEL=wgmma_overlap, wgmma_pingpong; SPATTN_CUDA_TMA=1) "
                         "as dense_V, bs10_128_V and full128_V for each V of VARIANTS, each "
                         "with vs_plain against its plain row")
    ap.add_argument("--also-blasst64", action="store_true",
                    help="also time BLASST in 64-row tiles (SPATTN_CUDA_BLASST_ROWS=64: each "
                         "64-row group skips alone) as blasst:LAMBDA_64")
    args = ap.parse_args()

    sp = Spattn(args.lib)
    dev = torch.cuda.get_device_name()
    rows = []

    def emit(d):
        d.update(gpu=dev, torch=torch.__version__, cuda=torch.version.cuda)
        rows.append(d)
        print(json.dumps(d), flush=True)

    H, KV, D = args.heads, args.kv_heads, args.dim
    for L in [] if args.skip_prefill else [int(x) for x in args.lens.split(",")]:
        torch.manual_seed(L)
        q = torch.randn((1, H, L, D), device="cuda", dtype=torch.bfloat16)
        k = torch.randn((1, KV, L, D), device="cuda", dtype=torch.bfloat16)
        v = torch.randn((1, KV, L, D), device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(q)
        lse = torch.empty((H, L), device="cuda", dtype=torch.float32)
        # torch's backends with GQA when they take it, else over k, v expanded to q's heads.
        gqa, fns = sdpa_contenders(q, k, v, H, KV)
        dense_args = sp.args("dense", q, k, v, out, lse)
        fns["dense"] = lambda: sp.run(dense_args)
        if args.also_mma:
            fns["dense_mma"] = with_kernel("mma", fns["dense"])

        # Correctness against the flash backend.
        sp.run(dense_args)
        if "flash" in fns:
            ref = fns["flash"]()
            torch.cuda.synchronize()
            err = (out.float() - ref.float()).abs().max().item()
            emit(dict(kind="check", seq=L, vs="flash", max_abs_diff=err))

        # Block-sparse: ~density of the causal 64x64 blocks, the diagonal always.
        nb = (L + 63) // 64
        g = torch.Generator(device="cpu").manual_seed(L + 1)
        grid = (torch.rand((H, nb, nb), generator=g) < args.density)
        grid |= torch.eye(nb, dtype=torch.bool).unsqueeze(0)
        grid &= torch.ones((nb, nb), dtype=torch.bool).tril().unsqueeze(0)
        grid = grid.to(torch.uint8)
        t0 = time.perf_counter()
        plan = sp.plan(grid, H, L, L, 64)
        plan_s = time.perf_counter() - t0
        bs_args = sp.args("block_sparse", q, k, v, out, lse, plan=plan)
        st = sp.run(sp.args("block_sparse", q, k, v, out, lse, plan=plan, want_stats=True))
        density = st.score_entries / st.causal_entries
        fns["bs10"] = lambda: sp.run(bs_args)
        # The same at 128x128 blocks (128-row kernel tiles), and every causal block in 64s and
        # 128s: what the list costs against the dense loop, at both tile heights.
        plans = [plan]
        nb2 = (L + 127) // 128
        grid2 = (torch.rand((H, nb2, nb2), generator=g) < args.density)
        grid2 |= torch.eye(nb2, dtype=torch.bool).unsqueeze(0)
        grid2 &= torch.ones((nb2, nb2), dtype=torch.bool).tril().unsqueeze(0)
        plans.append(sp.plan(grid2.to(torch.uint8), H, L, L, 128))
        st2 = sp.run(sp.args("block_sparse", q, k, v, out, lse, plan=plans[-1], want_stats=True))
        bs128_args = sp.args("block_sparse", q, k, v, out, lse, plan=plans[-1])
        fns["bs10_128"] = lambda: sp.run(bs128_args)
        full_args = {}
        for blk in (64, 128):
            n = (L + blk - 1) // blk
            full = torch.ones((nb, nb) if blk == 64 else (n, n), dtype=torch.bool).tril()
            plans.append(sp.plan(full.expand(H, n, n).to(torch.uint8).contiguous(), H, L, L, blk))
            full_args[blk] = sp.args("block_sparse", q, k, v, out, lse, plan=plans[-1])
        fns["full64"] = lambda: sp.run(full_args[64])
        fns["full128"] = lambda: sp.run(full_args[128])
        # Query-sparse: every 16th row and the last (MOMO's gamma = 16), compact out and lse.
        n_qs = len(range(15, L, 16)) + (0 if (L - 1) % 16 == 15 else 1)
        out_qs = torch.empty((1, H, n_qs, D), device="cuda", dtype=torch.bfloat16)
        lse_qs = torch.empty((H, n_qs), device="cuda", dtype=torch.float32)
        qs_args = sp.args("query_sparse", q, k, v, out_qs, lse_qs, row_stride=16)
        st_qs = sp.run(sp.args("query_sparse", q, k, v, out_qs, lse_qs, row_stride=16,
                               want_stats=True))
        fns["qs16"] = lambda: sp.run(qs_args)
        method_info = {}
        for spec in [m for m in args.methods.split(",") if m]:
            pl, mask_ms, dens = sp.plan_method(spec, sp.args("block_sparse", q, k, v, out, lse))
            plans.append(pl)
            method_info[spec] = dict(mask_host_ms=mask_ms, density=dens)
            fns[spec] = (lambda a: (lambda: sp.run(a)))(
                sp.args("block_sparse", q, k, v, out, lse, plan=pl))

        if args.also_schedules:
            for v, envs in VARIANTS.items():
                for n in ("dense", "bs10_128", "full128"):
                    fns[f"{n}_{v}"] = with_envs(envs, fns[n])

        ms = timed_round_robin(fns, args.reps, args.warmup)
        flops = causal_flops(H, L, D)
        for n, t in ms.items():
            d = dict(kind="time", seq=L, heads=H, kv_heads=KV, dim=D, contender=n, ms=t,
                     reps=args.reps)
            base, variant = variant_of(n)
            if n in ("cudnn", "flash", "dense", "dense_mma") or (base == "dense" and variant):
                d["tflops"] = flops / (t * 1e-3) / 1e12
            if variant:
                d["vs_plain"] = ms[base] / t
            if n in gqa:
                d["enable_gqa"] = gqa[n][3]
            if n == "bs10":
                d.update(density=density, plan_s=plan_s, vs_dense=ms["dense"] / t)
            if n == "bs10_128":
                d.update(density=st2.score_entries / st2.causal_entries, vs_dense=ms["dense"] / t)
            if n == "qs16":
                d.update(rows=n_qs, density=st_qs.score_entries / st_qs.causal_entries,
                         vs_dense=ms["dense"] / t)
            if n.startswith("full"):
                d.update(vs_dense=ms["dense"] / t)
            if n in method_info:
                d.update(method_info[n], vs_dense=ms["dense"] / t)
                for b in gqa:
                    d[f"vs_{b}"] = ms[b] / t
            if n == "dense_mma" or base == "dense":
                for b in gqa:
                    d[f"vs_{b}"] = ms[b] / t
            emit(d)
        for pl in plans:
            sp.lib.spattn_c_cuda_plan_free(pl)
        del q, k, v, out, lse, gqa, fns, out_qs, lse_qs
        torch.cuda.empty_cache()

    if not args.skip_blasst:
        L = args.blasst_len
        t0 = time.perf_counter()
        q, k, v = sp.workload("text", L, H, KV, D, 7)
        gen_s = time.perf_counter() - t0
        out = torch.empty_like(q)
        lse = torch.empty((H, L), device="cuda", dtype=torch.float32)
        fns = {"dense": (lambda a: (lambda: sp.run(a)))(sp.args("dense", q, k, v, out, lse))}
        info = {}
        for lam in [float(x) for x in args.blasst_lambda.split(",")]:
            a = sp.args("blasst", q, k, v, out, lse, lam=lam, local_first=True)
            st = sp.run(sp.args("blasst", q, k, v, out, lse, lam=lam, local_first=True,
                                want_stats=True))
            name = f"blasst:{lam:g}"
            info[name] = dict(lam=lam, skipped=st.tiles_skipped / max(1, st.tiles_visited))
            fns[name] = (lambda a: (lambda: sp.run(a)))(a)
            for suffix in (["_mma"] if args.also_mma else []) + (["_64"] if args.also_blasst64
                                                                   else []):
                fns[name + suffix] = with_variant(suffix, fns[name])
                st = with_variant(suffix, lambda: sp.run(sp.args(
                    "blasst", q, k, v, out, lse, lam=lam, local_first=True, want_stats=True)))()
                info[name + suffix] = dict(lam=lam,
                                           skipped=st.tiles_skipped / max(1, st.tiles_visited))
        if args.also_mma:
            fns["dense_mma"] = with_kernel("mma", fns["dense"])
        # Recall: the softmax mass each method computed, from its LSE against dense's.
        sp.run(sp.args("dense", q, k, v, out, lse))
        lse_dense = lse.clone()
        recall = {}
        for n in list(info):
            run = lambda n=n: sp.run(sp.args("blasst", q, k, v, out, lse, lam=info[n]["lam"],
                                             local_first=True))
            with_variant(n, run)()
            recall[n] = torch.exp(lse - lse_dense).mean().item()
        text_plans = []
        for spec in [m for m in args.methods.split(",") if m]:
            pl, mask_ms, dens = sp.plan_method(spec, sp.args("block_sparse", q, k, v, out, lse))
            text_plans.append(pl)
            recall[spec] = torch.exp(lse - lse_dense).mean().item()
            info[spec] = dict(mask_host_ms=mask_ms, density=dens)
            fns[spec] = (lambda a: (lambda: sp.run(a)))(
                sp.args("block_sparse", q, k, v, out, lse, plan=pl))
        for n in recall:
            info[n]["recall"] = recall[n]
        ms = timed_round_robin(fns, args.reps, args.warmup)
        for pl in text_plans:
            sp.lib.spattn_c_cuda_plan_free(pl)
        for n, t in ms.items():
            d = dict(kind="time", workload="text", seq=L, heads=H, kv_heads=KV, dim=D,
                     contender=n, ms=t, reps=args.reps, workload_s=gen_s)
            if n in info:
                d.update(info[n], vs_dense=ms["dense"] / t)
            if n.endswith("_mma"):
                d["vs_dense_mma"] = ms["dense_mma"] / t
            emit(d)

    if not args.skip_momo:
        # Methods whose whole pipeline runs on the device (momo: its selection too), timed as
        # called, against cuDNN SDPA and spattn dense on the same inputs; recall: the softmax
        # mass each computed, exp(lse_method - lse_dense), averaged over rows.
        for L in [int(x) for x in args.momo_lens.split(",") if x]:
            for kind in ("random", "text"):
                t0 = time.perf_counter()
                if kind == "random":
                    torch.manual_seed(L)
                    q, k, v = (torch.randn((1, h, L, D), device="cuda", dtype=torch.bfloat16)
                               for h in (H, KV, KV))
                else:
                    q, k, v = sp.workload("text", L, H, KV, D, 7)
                gen_s = time.perf_counter() - t0
                out = torch.empty_like(q)
                lse = torch.empty((H, L), device="cuda", dtype=torch.float32)
                gqa, fns = sdpa_contenders(q, k, v, H, KV, names=("cudnn",))
                dense_args = sp.args("dense", q, k, v, out, lse)
                fns["dense"] = lambda a=dense_args: sp.run(a)
                sp.run(dense_args)
                lse_dense, out_dense = lse.clone(), out.clone()
                info = {}
                for spec in [m for m in args.momo_specs.split(",") if m]:
                    a = sp.method(spec, sp.args("dense", q, k, v, out, lse))
                    torch.cuda.synchronize()
                    rel = ((out.float() - out_dense.float()).norm() /
                           out_dense.float().norm()).item()
                    info[spec] = dict(density=a.score_entries / a.causal_entries,
                                      recall=torch.exp(lse - lse_dense).mean().item(),
                                      rel_l2_vs_dense=rel)
                    fns[spec] = (lambda sp_, a_: (lambda: sp.method(sp_, a_)))(
                        spec, sp.args("dense", q, k, v, out, lse))
                    if args.also_fused and spec.split(":")[0] == "momo":
                        # The fused selection must give the unfused run's output, bit for bit.
                        out_unfused = out.clone()
                        fused = with_env("SPATTN_CUDA_MOMO_FUSED", "1", fns[spec])
                        fns[spec + "_fused"] = fused
                        fused()
                        torch.cuda.synchronize()
                        info[spec + "_fused"] = dict(
                            recall=torch.exp(lse - lse_dense).mean().item(),
                            equals_unfused=bool(torch.equal(out, out_unfused)))
                ms = timed_round_robin(fns, args.reps, args.warmup)
                for n, t in ms.items():
                    d = dict(kind="time", workload=kind, seq=L, heads=H, kv_heads=KV, dim=D,
                             contender=n, ms=t, reps=args.reps, workload_s=gen_s)
                    if n in info:
                        d.update(info[n], vs_dense=ms["dense"] / t)
                    if n.endswith("_fused"):
                        d["vs_unfused"] = ms[n[:-len("_fused")]] / t
                    if n in gqa:
                        d["enable_gqa"] = gqa[n][3]
                    if n != "cudnn" and "cudnn" in ms:
                        d["vs_cudnn"] = ms["cudnn"] / t
                    emit(d)
                del q, k, v, out, lse, gqa, fns, lse_dense, out_dense
                torch.cuda.empty_cache()

    if not args.skip_decode:
        for L in [int(x) for x in args.decode_lens.split(",")]:
            qf, k, v = sp.workload("text", L, H, KV, D, 9)
            q = qf[:, :, -1:, :]  # the newest query: a strided view, read in place
            del qf
            out = torch.empty((1, H, 1, D), device="cuda", dtype=torch.bfloat16)
            lse = torch.empty((H, 1), device="cuda", dtype=torch.float32)
            fns, info = {}, {}
            # One query sees every key: torch's is_causal is top-left aligned, so False.
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("flash", SDPBackend.FLASH_ATTENTION),
                                  ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
                qc = q.contiguous()
                try:
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(qc, k, v, enable_gqa=True)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 - report and go on without it
                    print(f"# decode {name}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
                    continue

                def f(backend=backend, qc=qc):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(qc, k, v, enable_gqa=True)
                fns[name] = f
            da = sp.args("decode", q, k, v, out, lse)
            fns["dense"] = (lambda a: (lambda: sp.run(a)))(da)
            sp.run(da)
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), enable_gqa=True)
            torch.cuda.synchronize()
            emit(dict(kind="check", workload="text", seq=L, q_len=1, vs="fp32 torch",
                      max_abs_diff=(out.float() - ref).abs().max().item()))
            for lam in [float(x) for x in args.decode_lambda.split(",")]:
                a = sp.args("decode", q, k, v, out, lse, lam=lam, local_first=True)
                st = sp.run(sp.args("decode", q, k, v, out, lse, lam=lam, local_first=True,
                                    want_stats=True))
                n = f"blasst:{lam:g}"
                info[n] = dict(lam=lam, skipped=st.tiles_skipped / max(1, st.tiles_visited),
                               max_abs_diff=(out.float() - ref).abs().max().item())
                fns[n] = (lambda a: (lambda: sp.run(a)))(a)
            inner = 20  # calls per timed sample: a call is tens of microseconds
            loops = {n: (lambda f: (lambda: [f() for _ in range(inner)]))(f) for n, f in fns.items()}
            ms = {n: t / inner for n, t in timed_round_robin(loops, args.reps, args.warmup).items()}
            kv_bytes = 2 * KV * L * D * 2
            for n, t in ms.items():
                d = dict(kind="time", workload="text", seq=L, q_len=1, heads=H, kv_heads=KV, dim=D,
                         contender=n, ms=t, reps=args.reps, inner=inner,
                         kv_gbps=kv_bytes / (t * 1e-3) / 1e9)
                d["hbm_fraction"] = d["kv_gbps"] / args.hbm_gbps
                if n in info:
                    d.update(info[n])
                d["vs_dense"] = ms["dense"] / t
                for b in ("cudnn", "flash", "efficient"):
                    if b in ms and n in ("dense",) + tuple(info):
                        d[f"vs_{b}"] = ms[b] / t
                emit(d)
            del q, k, v, out, lse, fns, loops
            torch.cuda.empty_cache()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
