#!/usr/bin/python3
"""MOMO's Fig. 2e on real attention (issue 27): the mass each online selector keeps against the
row's exact top-k at k = 16, 32, 64, 128, on every layer of code-tiny-8k (8K) and code-small-32k
(32K), one panel per layer, as a PNG.

The figures are `spattn select-diag --qkv DIR/layerN/ --k 16,32,64,128` (tools/cmd_select_diag.cpp;
the dumps from scripts/momo_real_dumps.sh): per sampled row the mass a selector's choice holds
over the exact top-k's (exact = 1), the mean over rows with more than k candidates; and the union
and trim of Algorithm 2 over exact per-row choices against the query block's top-k by its sampled
rows' mass (ranked by mean score, the paper's reading, and by summed row shares, momo's default).
Debian's python3-matplotlib (scripts/deps.sh), hence /usr/bin/python3.

Usage: scripts/momo_fig2e.py [--dumps build/dumps] [--bin build/bin/spattn]
         [--from-raw DIR] [--out docs/momo_fig2e_real.png]
  --from-raw DIR reads select-diag outputs kept by `scripts/momo_real_tables.py --raw DIR`
  (diag_MODEL_LAYER.txt, the command on the first line) instead of running them.
"""
import argparse
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODELS = [("tiny8k", "code-tiny-8k, 8K", 8), ("small32k", "code-small-32k, 32K", 6)]
KS = [16, 32, 64, 128]
# select-diag's columns, and how the figure names them.
SERIES = [
    ("hybrid", "hybrid 128/8 (paper default)", "tab:red", "-"),
    ("estimate", "estimate, Eqs. 5-6", "tab:orange", "-"),
    ("estimate_shuffled", "estimate, shuffled order", "tab:orange", ":"),
    ("trim_mean_S", "union+trim by mean S", "tab:purple", "--"),
    ("trim_sum_p", "union+trim by mass (default)", "tab:green", "--"),
    ("exact", "exact (default)", "black", "-"),
]


def diag(a, model, layer):
    """{k: {column: value}} from `spattn select-diag`'s first table."""
    if a.from_raw:
        with open(os.path.join(a.from_raw, f"diag_{model}_{layer}.txt")) as f:
            out = f.read().split("\n", 1)[1]
    else:
        cmd = [a.bin, "select-diag", "--qkv", f"{a.dumps}/{model}/layer{layer}/",
               "--k", ",".join(map(str, KS))]
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        out = subprocess.run(["nice"] + cmd, check=True, capture_output=True, text=True,
                             env=env).stdout
    rows, head = {}, None
    for ln in out.splitlines():
        f = ln.split()
        if ln.startswith("why"):
            break  # the second table (the reasons) has as many columns
        if f and f[0] == "k" and head is None:
            head = f[1:]
        elif head and f and f[0].isdigit() and len(f) == len(head) + 1:
            rows[int(f[0])] = dict(zip(head, map(float, f[1:])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", default="build/dumps")
    ap.add_argument("--bin", default="build/bin/spattn")
    ap.add_argument("--from-raw", default="")
    ap.add_argument("--out", default="docs/momo_fig2e_real.png")
    a = ap.parse_args()
    cols = max(n for _, _, n in MODELS)
    fig, axes = plt.subplots(len(MODELS), cols, figsize=(2.0 * cols, 2.3 * len(MODELS)),
                             sharey=True, squeeze=False)
    for mi, (model, title, layers) in enumerate(MODELS):
        for layer in range(cols):
            ax = axes[mi][layer]
            if layer >= layers:
                ax.axis("off")
                continue
            d = diag(a, model, layer)
            ks = [k for k in KS if k in d and d[k]["exact"] == d[k]["exact"]]  # not NaN
            for col, name, color, style in SERIES:
                ax.plot(ks, [d[k][col] for k in ks], style, color=color, marker=".", label=name,
                        linewidth=1.2)
            ax.set_xscale("log", base=2)
            ax.set_xticks(KS)
            ax.set_xticklabels([str(k) for k in KS], fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
            ax.set_title(f"{title}\nlayer {layer}" if layer == 0 else f"layer {layer}", fontsize=8)
            ax.grid(alpha=0.3)
            if layer == 0:
                ax.set_ylabel("mass / exact top-k's", fontsize=8)
            if mi == len(MODELS) - 1:
                ax.set_xlabel("k (blocks per row)", fontsize=7)
    axes[0][0].set_ylim(0.3, 1.02)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", bbox_to_anchor=(0.99, 0.06), fontsize=7,
               ncol=1, frameon=False)
    fig.suptitle("MOMO Fig. 2e on real attention: mass kept per sampled row against its exact "
                 "top-k (select-diag; gamma 16, beta 64)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(a.out, dpi=80)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
