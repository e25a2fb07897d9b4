#!/usr/bin/env python3
"""The prefill kernel's load pipelines timed against each other in one process (issue 25).

flash_fwd.cuh's kPipe: 0 FlashAttention-2's (V under S, K(next) under P V), 1 K a tile ahead
(BLASST's default), 2 K and V a tile ahead, 3 the same with one barrier a tile in runs of
block-skipped tiles; 4 and 5: blocks of two warps (one 64-row group, so BLASST's vote is the
block's) with pipelines 1 and 0. SPATTN_CUDA_PIPE (read at every launch) picks one
for the dense and BLASST kernels. Contenders, round-robin with CUDA events on the same inputs:
dense under --dense-pipes, BLASST (local_first) at each --lambda under --blasst-pipes, on the
project's `text` workload at --len (seed 7, as scripts/cuda_vs_torch.py), and dense on random
inputs at --dense-lens. Also checks that every pipeline writes the same bits as the default (the
arithmetic is the same; only when tiles load moves).

    python3 scripts/cuda_pipe_ab.py --lib build/lib/libspattn_c.so --json out.json
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_vs_torch import Spattn, timed_round_robin  # noqa: E402


def with_pipe(pipe, fn):
    def f():
        os.environ["SPATTN_CUDA_PIPE"] = str(pipe)
        fn()
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libspattn_c.so")
    ap.add_argument("--len", type=int, default=32768)
    ap.add_argument("--lambda", dest="lams", default="0.001,0.01,0.05")
    ap.add_argument("--dense-lens", default="131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dense-pipes", default="0,1,2,4,5")
    ap.add_argument("--blasst-pipes", default="1,2,3,4,5")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    sp = Spattn(args.lib)
    dp = [int(x) for x in args.dense_pipes.split(",")]
    bp = [int(x) for x in args.blasst_pipes.split(",")]
    H, KV, D = args.heads, args.kv_heads, args.dim
    rows = []

    def emit(d):
        d["device"] = torch.cuda.get_device_name()
        print(json.dumps(d), flush=True)
        rows.append(d)

    def same_bits(form, q, k, v, pipes, **kw):
        outs = []
        for pipe in pipes:
            os.environ["SPATTN_CUDA_PIPE"] = str(pipe)
            out = torch.empty_like(q)
            lse = torch.empty((H, q.shape[2]), device="cuda", dtype=torch.float32)
            sp.run(sp.args(form, q, k, v, out, lse, **kw))
            outs.append((out, lse))
        return all(torch.equal(o, outs[0][0]) and torch.equal(l, outs[0][1])
                   for o, l in outs[1:])

    L = args.len
    q, k, v = sp.workload("text", L, H, KV, D, 7)
    out = torch.empty_like(q)
    lse = torch.empty((H, L), device="cuda", dtype=torch.float32)
    fns, info = {}, {}
    for pipe in dp:
        fns[f"dense:p{pipe}"] = with_pipe(pipe, lambda a=sp.args("dense", q, k, v, out, lse):
                                          sp.run(a))
    emit(dict(kind="bits", form="dense", seq=L, workload="text",
              same=same_bits("dense", q, k, v, dp)))
    for lam in [float(x) for x in args.lams.split(",")]:
        for pipe in bp:
            os.environ["SPATTN_CUDA_PIPE"] = str(pipe)
            st = sp.run(sp.args("blasst", q, k, v, out, lse, lam=lam, local_first=True,
                                want_stats=True))
            name = f"blasst:{lam:g}:p{pipe}"
            info[name] = dict(lam=lam, pipe=pipe,
                              skipped=st.tiles_skipped / max(1, st.tiles_visited))
            fns[name] = with_pipe(pipe, lambda a=sp.args("blasst", q, k, v, out, lse, lam=lam,
                                                         local_first=True): sp.run(a))
        emit(dict(kind="bits", form="blasst", lam=lam, seq=L, workload="text",
                  same=same_bits("blasst", q, k, v, bp, lam=lam, local_first=True)))
    ms = timed_round_robin(fns, args.reps, args.warmup)
    for n, t in ms.items():
        d = dict(kind="time", workload="text", seq=L, heads=H, kv_heads=KV, dim=D, contender=n,
                 ms=t, reps=args.reps)
        d.update(info.get(n, {}))
        d.update({f"vs_dense_p{p}": ms[f"dense:p{p}"] / t for p in dp})
        emit(d)
    del q, k, v, out, lse
    torch.cuda.empty_cache()

    for L in [int(x) for x in args.dense_lens.split(",") if x]:
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn((1, H, L, D), device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn((1, KV, L, D), device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn((1, KV, L, D), device="cuda", dtype=torch.bfloat16, generator=g)
        out = torch.empty_like(q)
        lse = torch.empty((H, L), device="cuda", dtype=torch.float32)
        fns = {f"dense:p{p}": with_pipe(p, lambda a=sp.args("dense", q, k, v, out, lse):
                                        sp.run(a)) for p in dp}
        ms = timed_round_robin(fns, max(3, args.reps // 2), 1)
        flops = 4.0 * D * H * L * (L + 1) / 2.0
        for n, t in ms.items():
            emit(dict(kind="time", workload="random", seq=L, contender=n, ms=t,
                      tflops=flops / (t * 1e-3) / 1e12, vs_dense_p0=ms[f"dense:p{dp[0]}"] / t))
        del q, k, v, out, lse
        torch.cuda.empty_cache()
    os.environ.pop("SPATTN_CUDA_PIPE", None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
