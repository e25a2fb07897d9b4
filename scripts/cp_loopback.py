#!/usr/bin/env python3
"""Context parallelism on loopback (issue 26): `spattn run` in one process against
`mpirun -np P spattn run --cp P` on the same prompt, interleaved round by round so both see the
same machine. Reports prefill time, the ratio, each rank's time in communication and its share
of prefill, the ring's bytes per layer, and the KV cache per rank against one process's.

  scripts/cp_loopback.py --spattn build/bin/spattn -m MODEL.gguf -f TEXT --tokens 2048 4096
  scripts/cp_loopback.py ... --attn chunked_h2o -- -ub 256 -b 512   (a sparse prefill; after
                                                                  -- : options for every run)
"""
import argparse
import json
import os
import statistics
import subprocess


def run(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spattn", default="build/bin/spattn")
    ap.add_argument("-m", required=True)
    ap.add_argument("-f", required=True)
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="one process's -t; each rank gets "
                    "threads / ranks (at least 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=8, help="tokens decoded after the prompt")
    ap.add_argument("--attn", default="dense", help="the prefill method (dense, chunked_h2o, "
                    "an a_shape spec), in both runs")
    ap.add_argument("extra", nargs="*", help="more spattn run options, after --")
    a = ap.parse_args()
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    rank_t = max(1, a.threads // a.ranks)
    print(f"--attn {a.attn} {' '.join(a.extra)}")
    print(f"| prompt | one process (-t {a.threads}) prefill ms | {a.ranks} ranks (-t {rank_t} "
          f"each) prefill ms | ratio | comm share per rank (ring's) | ring KiB/layer per rank | "
          f"KV cache per rank / one process | decode ms/token one / ranks |")
    print("|---|---|---|---|---|---|---|---|")
    for n in a.tokens:
        base = [a.spattn, "run", "-m", a.m, "-f", a.f, "--max-prompt", str(n), "-n", str(a.n),
                "-c", str(n + a.n + 8), "--ignore-eos", "--json", "--attn", a.attn] + a.extra
        one, cp = [], []
        for _ in range(a.rounds):
            one.append(run(base + ["-t", str(a.threads)], env))
            cp.append(run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
                           "self,vader", "-x", "OMP_WAIT_POLICY", "-np", str(a.ranks)] + base +
                          ["-t", str(rank_t), "--cp", str(a.ranks)], env))
        assert all(c["tokens"] == one[0]["tokens"] for c in cp), "greedy tokens differ"
        t1 = statistics.median(r["prefill_ms"] for r in one)
        tp = statistics.median(max(x["prefill_ms"] for x in r["cp"]["per_rank"]) for r in cp)
        last = cp[-1]["cp"]["per_rank"]
        share = "/".join(f"{100 * x['prefill_comm_share']:.0f}% ({100 * x['ring_comm_share']:.0f}%)"
                         for x in last)
        ring = "/".join(f"{x['ring_bytes_per_layer'] / 1024:.0f}" for x in last)
        kv = "/".join(f"{x['kv_cache_bytes'] / one[-1]['memory']['kv_cache_bytes']:.3f}"
                      for x in last)
        d1 = statistics.median(r["decode_ms"] / max(1, r["decode_tokens"]) for r in one)
        dp = statistics.median(r["decode_ms"] / max(1, r["decode_tokens"]) for r in cp)
        print(f"| {n} | {t1:.0f} | {tp:.0f} | {t1 / tp:.2f}x | {share} | {ring} | {kv} | "
              f"{d1:.1f} / {dp:.1f} |")


if __name__ == "__main__":
    main()
