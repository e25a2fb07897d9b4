#!/usr/bin/env python3
"""Issue 27's tables from the dumps of scripts/momo_real_dumps.sh (stdlib only).

For every layer of both models:
  - `spattn select-diag`: the mass each online selector keeps per sampled row against the
    row's exact top-k at k = 16, 32, 64, 128 (MOMO's Fig. 2e per row), and the union-and-trim's
    own loss (Algorithm 2 over exact per-row choices against the query block's top-k_trim);
  - `spattn select-diag --recall`: momo's attention recall at two budgets (about 50% and 75%
    sparsity), at its default selection and at the paper's, against oracle_topk at matched
    density (the topk whose sparsity is closest, as `spattn bench --matched` picks it; with the
    default 64-row query blocks and with momo's chi = 128), every method's recall measured on
    exactly over every row (from the block mass grids).
Prints Markdown tables; --raw DIR keeps every command's output.

Usage: scripts/momo_real_tables.py [--dumps build/dumps] [--bin build/bin/spattn]
         [--selectors new,paper] [--what diag,recall] [--models tiny8k,small32k]
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Budgets per model: the momo spec suffixes that give about 50% and 75% sparsity (k blocks of
# 64 keys per sampled row; every sampled row, 1/16 of the rows, attends densely).
# The same k per model for every layer; momo's default gamma=auto takes 128 at all four.
BUDGETS = {
    "tiny8k": [("~50%", "k=33"), ("~75%", "k=14")],
    "small32k": [("~50%", "k=142"), ("~75%", "k=64")],
}
BUDGETS["small32k_h2"] = BUDGETS["small32k"]
# The selectors compared: the new default (exact selection, union of the block's sampled rows and
# the one above it ranked by row mass blended with the pooled estimate's share, its second-order
# term included, gamma=auto) and the paper's (hybrid 128/8 or min(8, k) exact slots,
# union ranked by the mean score).
# gamma16: the default before issue 27's second step (the paper's fixed query stride, the union over
# the block's own sampled rows); paper: that with the paper's selection.
# noblend: the default before the blend (the union of the sampled rows' choices alone).
# moments_block: blend=moments without the row above; meanpool: the default before blend=moments
# (main's until then; its union over the block's own sampled rows).
SELECTORS = {"new": "", "moments_block": "pool=block", "meanpool": "blend=mean_pool,pool=block",
             "meanpool_above": "blend=mean_pool,pool=above", "noblend": "blend=none", "gamma16": "gamma=16,pool=block,blend=none",
             "paper": "gamma=16,pool=block,topk=hybrid,trim=mean"}
# small32k_h2: q heads 0-1 and their kv head of every small32k layer (scripts/npy_head_slice.py),
# where the whole model's recall runs cost too much on a shared machine.
LAYERS = {"tiny8k": 8, "small32k": 6, "small32k_h2": 6}


FROM_RAW = ""  # --from-raw DIR: read the outputs a --raw DIR run kept instead of running


def run(cmd, raw, tag):
    if FROM_RAW:
        with open(os.path.join(FROM_RAW, tag + ".txt")) as f:
            return f.read().split("\n", 1)[1]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    out = subprocess.run(["nice"] + cmd, check=True, capture_output=True, text=True, env=env).stdout
    if raw:
        with open(os.path.join(raw, tag + ".txt"), "w") as f:
            f.write(" ".join(cmd) + "\n" + out)
    return out


def diag(a, model, layer, raw):
    """{k: {column: value}} from the two tables `spattn select-diag` prints (mass per selector,
    then the reasons per k)."""
    out = run([a.bin, "select-diag", "--qkv", f"{a.dumps}/{model}/layer{layer}/",
               "--k", "16,32,64,128"], raw, f"diag_{model}_{layer}")
    rows, head = {}, None
    for ln in out.splitlines():
        f = ln.split()
        if f and f[0] == "k":
            head = f[1:]
        elif head and f and f[0].isdigit():
            rows.setdefault(int(f[0]), {}).update(zip(head, map(float, f[1:])))
    return rows


def recall(a, model, layer, specs, raw):
    """(spec, sparsity, recall) rows from `spattn select-diag --recall`: each spec, then
    the oracle at matched density with 64- and 128-row query blocks."""
    cmd = [a.bin, "select-diag", "--qkv", f"{a.dumps}/{model}/layer{layer}/"]
    for s in specs:
        cmd += ["--recall", s]
    out = run(cmd, raw, f"recall_{model}_{layer}")
    rows = []
    for ln in out.splitlines():
        m = re.match(r"\s*(.+?)\s+([\d.]+)%\s+([\d.]+)$", ln)
        if m:
            rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", default="build/dumps")
    ap.add_argument("--bin", default="build/bin/spattn")
    ap.add_argument("--selectors", default="new,noblend")
    ap.add_argument("--what", default="diag,recall")
    ap.add_argument("--models", default="tiny8k,small32k")
    ap.add_argument("--raw", default="")
    ap.add_argument("--from-raw", default="", help="tables from a --raw DIR's outputs, no runs")
    a = ap.parse_args()
    global FROM_RAW
    FROM_RAW = a.from_raw
    if a.raw:
        os.makedirs(a.raw, exist_ok=True)
    models = a.models.split(",")
    what = a.what.split(",")
    if "diag" in what:
        print("| model | layer | k | exact | hybrid 8 | estimate | estimate, shuffled order | "
              "Gaussian, row's final m, sigma | trim by mean S | trim by mass | rows | corr(S, j) | "
              "skew | top-k in last quarter | estimate full at |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for model in models:
            for layer in range(LAYERS[model]):
                d = diag(a, model, layer, a.raw)
                for k in (16, 32, 64, 128):
                    r = d[k]
                    if r["rows"] == 0:
                        continue  # no row of this length has 2k candidates
                    print(f"| {model} | {layer} | {k} | {r['exact']:.3f} | {r['hybrid']:.3f} | "
                          f"{r['estimate']:.3f} | {r['estimate_shuffled']:.3f} | "
                          f"{r['gauss_final_stats']:.3f} | {r['trim_mean_S']:.3f} | "
                          f"{r['trim_sum_p']:.3f} | {int(r['rows'])} | {r['corr']:.2f} | "
                          f"{r['skew']:.2f} | {r['top_last_q']:.2f} | {r['full_at']:.2f} |",
                          flush=True)
    if "recall" in what:
        print("\n| model | layer | budget | selector | gamma | momo sparsity | momo recall | "
              "oracle (64-row blocks) sparsity, recall | gap | oracle (128-row blocks) sparsity, "
              "recall | gap | ceiling (momo's structure, oracle's blocks) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        sels = a.selectors.split(",")
        for model in models:
            for layer in range(LAYERS[model]):
                specs = [f"momo:{b},{SELECTORS[s]}".rstrip(",") for _, b in BUDGETS[model] for s in sels]
                rows = recall(a, model, layer, specs, a.raw)
                groups = []  # a method's line, then its oracle lines and its ceiling (if printed)
                for r in rows:
                    if r[0].startswith(("oracle_topk", "ceiling")):
                        groups[-1].append(r)
                    else:
                        groups.append([r])
                for i, spec in enumerate(specs):
                    m, o64, o128 = groups[i][:3]
                    ceil = f"{groups[i][3][2]:.4f}" if len(groups[i]) > 3 else "-"
                    label = [l for l, b in BUDGETS[model] if spec.startswith(f"momo:{b},") or spec == f"momo:{b}"][0]
                    sel = sels[i % len(sels)]
                    g = re.search(r"\(gamma (\d+)\)", m[0])
                    gamma = g.group(1) if g else "-"
                    print(f"| {model} | {layer} | {label} ({spec.split(':')[1].split(',')[0]}) | {sel} | {gamma} | "
                          f"{m[1]:.1f}% | {m[2]:.4f} | {o64[1]:.1f}%, {o64[2]:.4f} | "
                          f"{100 * (o64[2] - m[2]):.2f} | {o128[1]:.1f}%, {o128[2]:.4f} | "
                          f"{100 * (o128[2] - m[2]):.2f} | {ceil} |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
