#!/usr/bin/env python3
"""The tables scripts/benchmarks.sh writes at the top of BENCHMARKS.md, from the records it
left in DIR (bench JSON per input, vs_llama.py JSON, meta.json, commands.txt, skipped.txt):
one table per method family, the runner against llama.cpp, the GPU against cuDNN and flash
(from the GPU records DIR/gpu-records.txt lists, which scripts/cuda_vs_torch.py writes on a GPU
machine), and speed-vs-recall plots when the Python package and matplotlib are there; then the
index of the dated log, docs/benchmarks/log/*.md (one entry per file, title from its first line).

  benchmarks_tables.py DIR BENCHMARKS.md [--no-plots] [--check]

The blocks between BEGIN and END and between LOG_BEGIN and LOG_END are replaced (inserted when
absent); the rest of the file is left as it is. --no-plots keeps the PNGs as they are (their
links are still written); --check writes nothing, renders from the records as they are and
exits 1 when the file differs (ctest's benchmarks_current: BENCHMARKS.md is what its records
and log say)."""
import difflib
import glob
import json
import os
import sys

BEGIN = "<!-- benchmarks.sh:begin (generated: edit scripts/benchmarks.sh, not this block) -->"
END = "<!-- benchmarks.sh:end -->"
LOG_BEGIN = "<!-- benchmarks-log:begin (generated from docs/benchmarks/log/*.md) -->"
LOG_END = "<!-- benchmarks-log:end -->"
LOG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks", "log")

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


def gpu_tables(d):
    """Dense prefill against PyTorch's cuDNN and flash backends, and the methods on the GPU,
    from the records DIR/gpu-records.txt names (scripts/cuda_vs_torch.py --json); [] without."""
    listing = os.path.join(d, "gpu-records.txt")
    if not os.path.exists(listing):
        return []
    names = [n for n in open(listing).read().split("\n") if n]
    dense = ["### GPU prefill against PyTorch's SDPA backends", "",
             "`scripts/cuda_vs_torch.py` on one GPU, one process, CUDA events, round-robin "
             "(bf16, causal, batch 1, 32 q heads, 8 kv heads, head dim 128; ms and TFLOP/s of "
             "the causal half; ratio above 1: spattn faster). How these records were taken, with "
             "the command, and the rest of the GPU's figures (decode, BLASST, block sizes): "
             "[the log entry](docs/benchmarks/log/2026-11-27-gpu-the-cuda-backend.md).", "",
             "| GPU | L | cuDNN | flash (FlashAttention-2) | spattn dense | dense / flash | "
             "dense / cuDNN | record |", "|---|---|---:|---:|---:|---:|---:|---|"]
    methods = ["", "The methods through the method API on device tensors, random inputs (the "
               "mask built on the host, its time apart), from the first record:", "",
               "| GPU | L | method | density | kernel | vs own dense | vs cuDNN | mask on the host |",
               "|---|---|---|---:|---:|---:|---:|---:|"]
    for i, name in enumerate(names):  # the first record is the current code's: its methods
        recs = json.load(open(os.path.join(d, name)))
        timed = [r for r in recs if r.get("kind") == "time" and "workload" not in r]
        for seq in sorted({r["seq"] for r in timed}):
            at = {r["contender"]: r for r in timed if r["seq"] == seq}
            if not {"cudnn", "flash", "dense"} <= at.keys():
                continue
            c, f, s = at["cudnn"], at["flash"], at["dense"]
            gpu = s["gpu"].replace("NVIDIA ", "")
            dense.append(f"| {gpu} | {seq // 1024}K | {c['ms']:.2f} ms, {c['tflops']:.0f} | "
                         f"{f['ms']:.2f} ms, {f['tflops']:.0f} | {s['ms']:.2f} ms, "
                         f"{s['tflops']:.0f} | {s['vs_flash']:.2f}x | {s['vs_cudnn']:.2f}x | "
                         f"`{name}` |")
            for m in ("a_shape", "mean_pool"):
                if m in at and i == 0:
                    r = at[m]
                    methods.append(f"| {gpu} | {seq // 1024}K | `{m}` | {r['density']:.3f} | "
                                   f"{r['ms']:.2f} ms | {r['vs_dense']:.1f}x | "
                                   f"{r['vs_cudnn']:.2f}x | {r['mask_host_ms']:.1f} ms |")
    return dense + methods + [""]


def log_index():
    """One line per dated entry under docs/benchmarks/log/, newest first."""
    lines = [LOG_BEGIN, ""]
    for path in sorted(glob.glob(os.path.join(LOG_DIR, "*.md")), reverse=True):
        name = os.path.basename(path)
        if name == "README.md":
            continue
        title = open(path).readline().lstrip("#").strip()
        lines.append(f"- {name[:10]}: [{title}](docs/benchmarks/log/{name})")
    return lines + ["", LOG_END]


def plots(benches, d, out_dir, render=True):
    """speed_vs_recall per input, as PNGs next to the records (render=False: the PNGs as they
    are); a line saying why without matplotlib."""
    if render:
        try:
            from spattn import plot
        except Exception as e:  # no package or no matplotlib
            return [f"(plots skipped: {type(e).__name__}: {e})", ""]
    lines = ["### Speed against missed attention mass", ""]
    for (lab, rec), name in zip(benches, d):
        png = os.path.join(out_dir, os.path.splitext(os.path.basename(name))[0] + ".png")
        if render:
            plot.speed_vs_recall(rec).savefig(png, dpi=90)
        lines.append(f"![{lab}]({png})")
    return lines + [""]


def replace_block(text, begin, end, block):
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    title, _, rest = text.partition("\n")  # after the title line
    return title + "\n\n" + block + "\n" + rest


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    check, render = "--check" in sys.argv, "--no-plots" not in sys.argv and "--check" not in sys.argv
    d, target = args[0], args[1]
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
    lines += gpu_tables(d)
    for s in skipped:
        lines += [f"Skipped: {s}.", ""]
    lines += plots(benches, bench_paths, rel_dir if not os.path.isabs(d) else d, render)
    lines += [END]
    old = open(target).read()
    text = replace_block(old, BEGIN, END, "\n".join(lines))
    if os.path.isdir(LOG_DIR):
        text = replace_block(text, LOG_BEGIN, LOG_END, "\n".join(log_index()))
    if check:
        if text != old:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       target, "rendered"))
            sys.exit(f"{target} is not what {d} and the log render: run "
                     f"scripts/benchmarks_tables.py {d} {target} --no-plots")
        return
    open(target, "w").write(text)


if __name__ == "__main__":
    main()
