#!/usr/bin/env python3
"""Markdown tables from `spattn eval --json` files (scripts/ruler_eval.sh writes them).

Per model and length, one row per prefill method and one column per task, each cell the
likelihood gap (mean log-likelihood per reference token with the needles minus without them,
nats) and RULER's exact-match score in percent; then the gap over the tasks as a share of
dense's. A long table (every cell's likelihoods) follows with --long.

    python3 scripts/ruler_table.py build/ruler/*.json [--long]
"""
import json
import os
import sys
from collections import OrderedDict, defaultdict


def main(argv):
    long_form = "--long" in argv
    files = [a for a in argv if a != "--long"]
    if not files:
        sys.exit("usage: ruler_table.py FILE.json... [--long]")
    # (model, length) -> method -> task -> result
    cells = OrderedDict()
    tasks_seen = OrderedDict()
    methods_seen = OrderedDict()
    samples = set()
    for path in files:
        with open(path) as f:
            j = json.load(f)
        model = os.path.basename(j["model"])
        samples.add(j["samples"])
        for r in j["results"]:
            key = (model, r["length"])
            cells.setdefault(key, defaultdict(dict))[r["method"]][r["task"]] = r
            tasks_seen[r["task"]] = True
            methods_seen[r["method"]] = True
    order = {t: i for i, t in enumerate(
        ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
         "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
         "vt", "cwe", "fwe"])}
    out = []
    for (model, length) in sorted(cells, key=lambda k: (k[0], k[1])):
        by_method = cells[(model, length)]
        tasks = sorted({t for m in by_method.values() for t in m}, key=lambda t: order.get(t, 99))
        out.append(f"**{model}, {length} tokens** (cell: likelihood gap in nats per answer "
                   f"token, then exact match %; samples per cell: "
                   f"{', '.join(str(s) for s in sorted(samples))})\n")
        out.append("| method | " + " | ".join(tasks) + " | mean gap | gap vs dense |")
        out.append("|---" * (len(tasks) + 3) + "|")
        dense = by_method.get("dense", {})
        for method in methods_seen:
            if method not in by_method:
                continue
            row = by_method[method]
            cols, gaps, dense_gaps = [], [], []
            for t in tasks:
                r = row.get(t)
                if r is None:
                    cols.append("-")
                    continue
                cols.append(f"{r['gap']:+.2f} ({r['score']:.0f})")
                if t in dense:
                    gaps.append(r["gap"])
                    dense_gaps.append(dense[t]["gap"])
            mean = sum(gaps) / len(gaps) if gaps else float("nan")
            dmean = sum(dense_gaps) / len(dense_gaps) if dense_gaps else float("nan")
            share = f"{mean / dmean:.2f}" if dense_gaps and dmean != 0 else "-"
            out.append(f"| {method} | " + " | ".join(cols) + f" | {mean:+.2f} | {share} |")
        out.append("")
    if long_form:
        out.append("| model | length | task | method | exact match % | ll with | ll without | "
                   "gap | prompt tokens |")
        out.append("|---" * 9 + "|")
        for (model, length), by_method in cells.items():
            for method, row in by_method.items():
                for t in sorted(row, key=lambda t: order.get(t, 99)):
                    r = row[t]
                    out.append(f"| {model} | {length} | {t} | {method} | {r['score']:.1f} | "
                               f"{r['ll_with']:.3f} | {r['ll_without']:.3f} | {r['gap']:+.3f} | "
                               f"{r['prompt_tokens']:.0f} |")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
