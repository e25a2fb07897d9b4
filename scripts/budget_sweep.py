#!/usr/bin/env python3
"""Mass and threshold budgets against counts at equal mean density (issue 61's must-show).

Runs `spattn bench --json --repeat 1` once over a sweep of count runs (`--count`) and budget
runs (`--budget`) on one dump, then, for each budget run, reads the counts' mean and worst-row
recall at the budget run's sparsity by linear interpolation between the two count runs that
bracket it (as the 2026-11-27 log entry did). Recall is deterministic; times are not read.

  scripts/budget_sweep.py --bin build/bin/spattn --qkv DUMP [--q-len N] \\
      --count 'mean_pool:topk={}' 4 8 16 ... --budget 'mean_pool:topp={}' 0.9 0.95 ...

Prints a Markdown table: run, sparsity, recall / worst, the counts' at that sparsity (and the
bracketing runs), the mean's difference in points, whether the worst row is at least the
counts', and issue 61's bar: a `topp` run (any budget but `min_share`) meets it with the worst
row at least the counts' and the mean within 0.5 points; a `min_share` run with the mean at
least the counts'. A budget run outside the counts' sparsity range is marked "outside". A
worst-row miss whose worst row equals the sparser bracketing count's to four digits is marked
"tied with" that count: the row kept what it keeps under that count, while the chord between
two counts lies above that step (the 2026-12-04 log entry "... and the sparse end").
`--save FILE` keeps bench's JSON.

Decode budgets (quest's, which choose pages per decode step and have no prefill mask to read
from a dump): `--model M --text F --ctx N --decode-tail T` instead of `--qkv` runs
`spattn perplexity --decode-recall` once per spec (one window of N tokens, its last T decoded),
and reads each run's attention recall over the sparse layers' head-steps (mean and worst) at
the sparsity of the sparse layers' reads (the dense layers' share taken out of the keys read).

  scripts/budget_sweep.py --model $MODELS/code-tiny-8k.gguf --text $MODELS/code-heldout.txt \\
      --ctx 8192 --decode-tail 128 --count 'quest:k={}' 16 32 64 ... --budget 'quest:topp={}' 0.9
"""
import argparse
import json
import subprocess
import sys


def sweep(template, values):
    return [template.format(v) for v in values]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/bin/spattn")
    ap.add_argument("--qkv", help="a Q/K/V dump (prefill budgets)")
    ap.add_argument("--model", help="a GGUF model (decode budgets, with --text)")
    ap.add_argument("--text", help="the text whose first window is decoded")
    ap.add_argument("--ctx", type=int, default=8192, help="decode: the window, in tokens")
    ap.add_argument("--decode-tail", type=int, default=128, help="decode: tokens decoded")
    ap.add_argument("--q-len", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--count", nargs="+", required=True)
    ap.add_argument("--budget", nargs="+", action="append", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--save", default="", help="write bench's JSON here")
    a = ap.parse_args()
    if bool(a.qkv) == bool(a.model and a.text):
        ap.error("give --qkv DUMP, or --model and --text")
    counts = sweep(a.count[0], a.count[1:])
    budgets = [s for b in a.budget for s in sweep(b[0], b[1:])]
    by = decode_runs(a, counts + budgets) if a.model else bench_runs(a, counts + budgets)
    table(a.label, by, counts, budgets)


def decode_runs(a, specs):
    """Each spec's decode recall and the sparsity of its sparse layers' reads."""
    by, saved = {}, []
    for m in specs:
        cmd = [a.bin, "perplexity", "-m", a.model, "-f", a.text, "-c", str(a.ctx), "--chunks",
               "1", "--decode-tail", str(a.decode_tail), "--decode-recall", "--attn-decode", m,
               "--json"]
        if a.threads:
            cmd += ["-t", str(a.threads)]
        print("$ " + " ".join(cmd), file=sys.stderr)
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        saved.append(out)
        r = out["results"][m]
        layers = r["recall"]["per_layer"]
        dense = sum(1 for x in layers if x["dense"]) / len(layers)
        read = r["decode_keys_read"] / r["decode_keys_total"]
        by[m] = {"sparsity": 1 - (read - dense) / (1 - dense), "recall": r["recall"]["mean"],
                 "recall_min": r["recall"]["worst"]}
    if a.save:
        with open(a.save, "w") as f:
            json.dump(saved, f, indent=1)
    return by


def bench_runs(a, specs):
    """Every spec's recall and sparsity on the dump, from one `spattn bench` run."""
    cmd = [a.bin, "bench", "--qkv", a.qkv, "--repeat", "1", "--json"]
    if a.q_len:
        cmd += ["--q-len", str(a.q_len)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    for m in specs:
        cmd += ["--method", m]
    print("$ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    if a.save:
        with open(a.save, "w") as f:
            f.write(out)
    return {r["method"]: r for r in json.loads(out)["results"]}


def table(label, by, counts, budgets):
    """The Markdown table: each budget run against the count curve at its sparsity."""
    curve = sorted((by[m]["sparsity"], by[m]["recall"], by[m]["recall_min"], m) for m in counts)
    print(f"| input | run | sparsity | recall / worst row | count curve at that sparsity "
          f"(bracketing runs) | mean difference, points | worst >= counts' | bar |")
    print("|---|---|---:|---|---|---:|---|---|")
    for m in budgets:
        r = by[m]
        s = r["sparsity"]
        lo = [c for c in curve if c[0] <= s]
        hi = [c for c in curve if c[0] >= s]
        if not lo or not hi:
            print(f"| {label} | `{m}` | {100*s:.1f}% | {r['recall']:.4f} / {r['recall_min']:.4f} "
                  f"| outside the counts' range | - | - | - |")
            continue
        x0, x1 = lo[-1], hi[0]
        t = 0.0 if x1[0] == x0[0] else (s - x0[0]) / (x1[0] - x0[0])
        mean = x0[1] + t * (x1[1] - x0[1])
        worst = x0[2] + t * (x1[2] - x0[2])
        diff = 100 * (r["recall"] - mean)
        if "min_share" in m:
            bar = "met" if diff >= 0 else "not met (mean)"
        else:
            misses = [w for w, ok in (("worst", r["recall_min"] >= worst), ("mean", diff >= -0.5))
                      if not ok]
            bar = "met" if not misses else f"not met ({', '.join(misses)})"
            if "worst" in misses and f"{r['recall_min']:.4f}" == f"{x1[2]:.4f}":
                bar += f"; worst row tied with `{x1[3]}`'s"
        print(f"| {label} | `{m}` | {100*s:.1f}% | {r['recall']:.4f} / {r['recall_min']:.4f} | "
              f"{mean:.4f} / {worst:.4f} (`{x0[3]}` .. `{x1[3]}`) | "
              f"{diff:+.2f} | {'yes' if r['recall_min'] >= worst else 'no'} | {bar} |")
    print("\ncount runs: " + "; ".join(f"`{m}` {100*s:.1f}% {rc:.4f}/{w:.4f}"
                                        for s, rc, w, m in curve))


if __name__ == "__main__":
    main()
