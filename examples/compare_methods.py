"""Every spattn method on one attention problem: a table of speed beside accuracy, and a
speed-vs-recall plot.

    PYTHONPATH=build/python /usr/bin/python3 examples/compare_methods.py            # text workload
    PYTHONPATH=build/python /usr/bin/python3 examples/compare_methods.py q.npy k.npy v.npy
    PYTHONPATH=build/python /usr/bin/python3 examples/compare_methods.py dump_dir/

Arrays are [heads, seq, dim] (--file-layout shd for [seq, heads, dim]); a directory, prefix or
.safetensors file is read as `spattn bench --qkv` reads it. Each method runs at its paper
defaults (or --method SPEC, repeatable); times are medians of runs taken round-robin.
"""
import argparse
import json
import os

import numpy as np

import spattn
import spattn.plot


def load(paths, file_layout):
    if len(paths) == 3 and all(p.endswith(".npy") for p in paths):
        q, k, v = (np.load(p) for p in paths)
        if file_layout == "shd":
            q, k, v = (x.transpose(1, 0, 2) for x in (q, k, v))
        return (q, k, v), "bhsd", ", ".join(paths)
    if len(paths) == 1:
        return spattn.load_qkv(paths[0], file_layout=file_layout, layout="bhsd"), "bhsd", paths[0]
    raise SystemExit("give q.npy k.npy v.npy, or one directory, prefix or .safetensors file")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qkv", nargs="*", help="q.npy k.npy v.npy, or a directory/prefix/file")
    ap.add_argument("--file-layout", default="hsd", choices=["hsd", "shd"])
    ap.add_argument("--workload", default="text")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", action="append", help="method spec (repeatable; default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="compare_methods.png", help="speed-vs-recall plot (PNG)")
    ap.add_argument("--json", help="also write the bench records here (JSON)")
    a = ap.parse_args()

    if a.qkv:
        (q, k, v), layout, source = load(a.qkv, a.file_layout)
        records = spattn.bench(q, k, v, layout=layout, methods=a.method, repeat=a.repeat,
                               threads=a.threads)
    else:
        source = f"{a.workload} workload, seed {a.seed}"
        records = spattn.bench(methods=a.method, workload=a.workload, seq=a.seq, heads=a.heads,
                               kv_heads=a.kv_heads, dim=a.dim, seed=a.seed, repeat=a.repeat,
                               threads=a.threads)
    c, m = records["config"], records["machine"]
    print(f"{m['cpu']}, {m['threads']} threads, SIMD {m['simd']}")
    print(f"{source}: q_len {c['q_len']}, kv_len {c['seq']}, {c['heads']} q heads, "
          f"{c['kv_heads']} kv heads, dim {c['dim']}, {c['dtype']}, "
          f"{'causal' if c['causal'] else 'full'}")
    print(f"\n{'method':<22} {'ms':>9} {'speedup':>8} {'sparsity':>9} {'recall':>8} "
          f"{'worst':>8} {'rel-L2':>9}")
    for r in records["results"]:
        print(f"{r['method']:<22} {r['ms']:>9.2f} {r['speedup']:>7.2f}x "
              f"{100 * r['sparsity']:>8.1f}% {r['recall']:>8.4f} {r['recall_min']:>8.4f} "
              f"{r['rel_l2']:>9.1e}")
    evaluation = [x["name"] for x in spattn.method_catalog() if x["evaluation_only"]]
    if evaluation:
        print(f"\nevaluation only (compare recall, not time): {', '.join(evaluation)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)
    fig = spattn.plot.speed_vs_recall(records)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {os.path.abspath(a.out)}")


if __name__ == "__main__":
    main()
