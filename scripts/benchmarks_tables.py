#!/usr/bin/env python3
"""The tables scripts/benchmarks.sh writes at the top of BENCHMARKS.md, from the records it
left in DIR (bench JSON per input, vs_llama.py JSON, meta.json, commands.txt, skipped.txt):
one table per method family, the runner against llama.cpp, and speed-vs-recall plots when
the Python package and matplotlib are there.

  benchmarks_tables.py DIR BENCHMARKS.md

The block between BEGIN and END is replaced (inserted after the title when absent); the rest
of the file is left as it is."""
import json
import os
import sys

BEGIN = "<!-- benchmarks.sh:begin (generated: edit scripts/benchmarks.sh, not this block) -->"
END = "<!-- benchmarks.sh:end -->"

# Method name (before ':') -> family, in the order the tables appear. A method not listed
# here lands in "Other", so a new method still shows up.
FAMILIES = [
    ("BLASST: softmax thresholding (blasst)", ["blasst"]),
    ("MOMO: delta-refined block sparse attention (momo)", ["momo"]),
    ("MMInference's patterns and its baselines' static masks",
     ["mminference", "a_shape", "tri_shape", "vertical_slash", "sf_fixed", "sf_strided"]),
    ("Blocks chosen from an estimate (mean_pool, XAttention, FlexPrefill) and the oracle",
     ["mean_pool", "xattention", "flexprefill", "oracle_topk"]),
    ("Chunked prefill with a heavy-hitter memory (chunked_h2o)", ["chunked_h2o"]),
]
# Evaluation-only methods compute more than dense to choose what to compute: their time is no
# speed claim (the package's method catalog says which; this is its list when it is absent).
EVALUATION_ONLY = {"oracle_topk"}


def base(method):
    return method.split(":")[0]


def label(rec, path):
    c = rec.get("config", {})
    n = c.get("seq", 0)
    size = f"{n // 1024}K" if n % 1024 == 0 else str(n)
    if "dump" in os.path.basename(path):
        return f"real dump (code-tiny-8k layer 6) {size}"
    return f"{c.get('workload', '?')} {size}"


def evaluation_only():
    try:
        from spattn import _core
        return {m["name"] for m in _core.method_catalog() if m["evaluation_only"]}
    except Exception:  # the package is not built: the fixed list
        return EVALUATION_ONLY


def family_tables(benches, evals):
    out = []
    known = {m for _, ms in FAMILIES for m in ms}
    seen = {base(r["method"]) for _, rec in benches for r in rec["results"]} - {"dense"}
    families = FAMILIES + ([("Other", sorted(seen - known))] if seen - known else [])
    for title, members in families:
        rows = []
        for lab, rec in benches:
            for r in rec["results"]:
                if base(r["method"]) in members:
                    rows.append((lab, r))
        if not rows:
            continue
        out += [f"### {title}", "",
                "| method | input | sparsity | speedup over dense | recall (mean) | recall (worst row) |",
                "|---|---|---:|---:|---:|---:|"]
        for lab, r in rows:
            speed = f"{r['speedup']:.2f}x"
            if base(r["method"]) in evals:
                speed += " (evaluation only)"
            out.append(f"| `{r['method']}` | {lab} | {100 * r['sparsity']:.1f}% | {speed} | "
                       f"{r['recall']:.4f} | {r['recall_min']:.4f} |")
        out.append("")
    return out


def dense_lines(benches):
    out = ["Dense, the denominator of every speedup (median of the timed runs in the same process):", ""]
    for lab, rec in benches:
        c = rec["config"]
        d = next(r for r in rec["results"] if r["method"] == "dense")
        out.append(f"- {lab}: {d['ms']:.1f} ms ({c['heads']} q heads, {c['kv_heads']} kv heads, "
                   f"dim {c['dim']}, {c['dtype']}, {c['threads']} threads, {c['repeat']} timed runs "
                   f"per method)")
    return out + [""]


def llama_table(rows):
    out = ["### The model runner against llama.cpp", "",
           "`spattn run` and `llama-bench` on the same GGUF file, threads and machine, timed "
           "round-robin by `scripts/vs_llama.py` (tokens per second, medians; ratio above 1: "
           "spattn faster).", "",
           "| model | test | llama.cpp tok/s | spattn tok/s | ratio |", "|---|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['test']} | {r['llama_median']:.1f} | "
                   f"{r['spattn_median']:.1f} | {r['ratio']:.2f}x |")
    return out + [""]


def plots(benches, d, out_dir):
    """speed_vs_recall per input, as PNGs next to the records; [] without matplotlib."""
    try:
        from spattn import plot
    except Exception as e:  # no package or no matplotlib
        return [f"(plots skipped: {type(e).__name__}: {e})", ""]
    lines = ["### Speed against missed attention mass", ""]
    for (lab, rec), name in zip(benches, d):
        png = os.path.join(out_dir, os.path.splitext(os.path.basename(name))[0] + ".png")
        plot.speed_vs_recall(rec).savefig(png, dpi=90)
        lines.append(f"![{lab}]({png})")
    return lines + [""]


def main():
    d, target = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(d, "meta.json")))
    paths = [p for p in open(os.path.join(d, "records.txt")).read().split("\n") if p]
    commands = [c for c in open(os.path.join(d, "commands.txt")).read().split("\n") if c]
    skipped = [s for s in open(os.path.join(d, "skipped.txt")).read().split("\n") if s]
    benches, bench_paths, llama = [], [], None
    for p in paths:
        rec = json.load(open(p))
        if isinstance(rec, list):
            llama = rec
        else:
            benches.append((label(rec, p), rec))
            bench_paths.append(p)
    rel_dir = os.path.relpath(d, os.path.dirname(os.path.abspath(target)) or ".")
    lines = [BEGIN, "", "## Current figures", "",
             f"Generated by `scripts/benchmarks.sh{' --quick' if meta['quick'] == '1' else ''}` "
             f"on {meta['date']}: {meta['cpu'] or 'unknown CPU'}, {meta['cores']} cores, commit "
             f"{meta['commit']} ({meta['tree']} tree)." + (f" {meta['note']}" if meta["note"] else ""),
             "",
             "Speedup is dense's median time over the method's, both timed in the same `spattn "
             "bench` process with runs taken round-robin (so a busy machine slows both alike); "
             "recall is the softmax mass the method keeps (mean over rows, and the worst row); "
             "sparsity is the share of causal score entries skipped. Every method runs at its "
             "paper defaults. Records (JSON) and plots are in `" + rel_dir + "/`.", "",
             "Commands:", ""]
    lines += [f"    {c}" for c in commands] + [""]
    lines += dense_lines(benches)
    lines += family_tables(benches, evaluation_only())
    if llama:
        lines += llama_table(llama)
    for s in skipped:
        lines += [f"Skipped: {s}.", ""]
    lines += plots(benches, bench_paths, rel_dir if not os.path.isabs(d) else d)
    lines += [END]
    text = open(target).read()
    block = "\n".join(lines)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:  # after the title line
        title, _, rest = text.partition("\n")
        text = title + "\n\n" + block + "\n" + rest
    open(target, "w").write(text)


if __name__ == "__main__":
    main()
