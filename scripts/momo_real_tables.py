#!/usr/bin/env python3
"""Issue 27's tables from the dumps of scripts/momo_real_dumps.sh (stdlib only).

For every layer of both models:
  - `spattn select-diag`: the mass each online selector keeps per sampled row against the
    row's exact top-k at k = 16, 32, 64, 128 (MOMO's Fig. 2e per row), and the union-and-trim's
    own loss (Algorithm 2 over exact per-row choices against the query block's top-k_trim);
  - `spattn bench --qkv ... --matched oracle_topk`: momo's attention recall at two budgets
    (about 50% and 75% sparsity) with the selectors given, against oracle_topk at matched
    density.
Prints Markdown tables; --raw DIR keeps every command's output.

Usage: scripts/momo_real_tables.py [--dumps /work/ext/dumps] [--bin build/bin/spattn]
         [--selectors exact,hybrid] [--what diag,recall] [--models tiny8k,small32k]
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Budgets per model: the momo spec suffixes that give about 50% and 75% sparsity (k blocks of
# 64 keys per sampled row; every sampled row, 1/16 of the rows, attends densely).
BUDGETS = {
    "tiny8k": [("~50%", "k=32"), ("~75%", "k=8")],
    "small32k": [("~50%", "k=128"), ("~75%", "k=32")],
}
LAYERS = {"tiny8k": 8, "small32k": 6}


def run(cmd, raw, tag):
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    out = subprocess.run(["nice"] + cmd, check=True, capture_output=True, text=True, env=env).stdout
    if raw:
        with open(os.path.join(raw, tag + ".txt"), "w") as f:
            f.write(" ".join(cmd) + "\n" + out)
    return out


def diag(a, model, layer, raw):
    out = run([a.bin, "select-diag", "--qkv", f"{a.dumps}/{model}/layer{layer}/",
               "--k", "16,32,64,128"], raw, f"diag_{model}_{layer}")
    rows = {}
    lines = out.splitlines()
    head = None
    for ln in lines:
        f = ln.split()
        if f and f[0] == "k":
            head = f[1:]
        elif head and f and f[0].isdigit():
            rows[int(f[0])] = dict(zip(head, map(float, f[1:])))
        m = re.match(r"\s+(corr|true top-k|estimate's slots full at)\D*?(-?[\d.]+)", ln)
        if m:
            rows[m.group(1)] = float(m.group(2))
    return rows


def recall(a, model, layer, spec, raw):
    out = run([a.bin, "bench", "--qkv", f"{a.dumps}/{model}/layer{layer}/", "--method", spec,
               "--matched", "oracle_topk", "--repeat", "1", "--json"], raw,
              f"bench_{model}_{layer}_{spec.replace(':', '_').replace(',', '_')}")
    j = json.loads(out)
    momo = [r for r in j["results"] if r["method"].startswith("momo")][0]
    orc = [r for r in j["results"] if r["method"].startswith("oracle_topk")][0]
    return momo, orc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", default="/work/ext/dumps")
    ap.add_argument("--bin", default="build/bin/spattn")
    ap.add_argument("--selectors", default="exact,hybrid")
    ap.add_argument("--what", default="diag,recall")
    ap.add_argument("--models", default="tiny8k,small32k")
    ap.add_argument("--raw", default="")
    a = ap.parse_args()
    if a.raw:
        os.makedirs(a.raw, exist_ok=True)
    models = a.models.split(",")
    what = a.what.split(",")
    if "diag" in what:
        print("| model | layer | k | exact | hybrid 8 | estimate | estimate, shuffled order | "
              "Gaussian, final stats | trim (mean S) | corr(S, j) | true top-128 in last quarter | "
              "estimate full at |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for model in models:
            for layer in range(LAYERS[model]):
                d = diag(a, model, layer, a.raw)
                for k in (16, 32, 64, 128):
                    r = d[k]
                    extra = (f"{d['corr']:.2f} | {d['true top-k']:.2f} | "
                             f"{d[\"estimate's slots full at\"]:.2f}") if k == 128 else " | | "
                    print(f"| {model} | {layer} | {k} | {r['exact']:.3f} | {r['hybrid']:.3f} | "
                          f"{r['estimate']:.3f} | {r['estimate_shuffled']:.3f} | "
                          f"{r['gauss_final_stats']:.3f} | {r['trim_mean_S']:.3f} | {extra} |",
                          flush=True)
    if "recall" in what:
        print("\n| model | layer | budget | selector | momo sparsity | momo recall | "
              "oracle_topk sparsity | oracle recall | gap (points) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for model in models:
            for layer in range(LAYERS[model]):
                for label, budget in BUDGETS[model]:
                    for sel in a.selectors.split(","):
                        spec = f"momo:{budget},topk={sel}"
                        m, o = recall(a, model, layer, spec, a.raw)
                        gap = 100 * (o["recall"] - m["recall"])
                        print(f"| {model} | {layer} | {label} ({budget}) | {sel} | "
                              f"{100 * m['sparsity']:.1f}% | {m['recall']:.4f} | "
                              f"{100 * o['sparsity']:.1f}% | {o['recall']:.4f} | {gap:.2f} |",
                              flush=True)


if __name__ == "__main__":
    sys.exit(main())
