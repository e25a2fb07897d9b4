#!/usr/bin/env python3
"""spattn's runner against llama.cpp on the same GGUF file, threads and machine, timed
round-robin: llama-bench once, spattn once, llama-bench once, ... (the order flips every
round), so drift in the machine's speed lands on both. Prints the medians and their ratio.

  scripts/vs_llama.py --llama-bin DIR -m MODEL.gguf --test pp512 [--test tg128 ...]
      [--test tg32@16384] [--reps 3] [-t 2] [--text FILE] [--json]
      [--attn dense --attn chunked_h2o ...] [--attn-decode quest ...]
      [--spattn-arg=-ctk --spattn-arg=q8_0 ...] [--spattn-build OLD/bin/spattn ...]

Tests, as llama-bench names them: ppN (prefill of N tokens, llama-bench -p N -n 0), tgN
(N decode steps from an empty context, -p 0 -n N), tgN@D (N decode steps after D tokens,
-n N -d D). Both sides warm up first (llama-bench's warm-up run; spattn run --warmup), unless
--no-warmup: then neither does, for rows where one warm-up is as long as the timed run (a 16K
prompt through a 128-head latent attention takes llama.cpp most of 20 minutes on 2 cores).
llama-bench runs with its defaults (-b 2048 -ub 512, f16 KV cache) plus -fa 1; spattn run
with the same -b/-ub, dense attention unless --spattn-arg says otherwise (each --spattn-arg
is appended to spattn run's command line: a method, -ub, a cache type), greedy, --ignore-eos.
For ppN both sides' time to first token (N / tokens per second) is printed too. Each --attn
is one more spattn side in the same rotation (llama-bench, then each method, the starting
side moving by one every round), printed as a row of its own against the same llama runs;
each --attn-decode SPEC likewise (a decode method: for tgN@D its row also gives the decode
attention's ms per token and the share of cached keys it read). spattn's prompt is the first N
tokens of --text (llama-bench's are random tokens: the same work for dense attention).
Each --spattn-build BIN is one more side running another build of spattn (an older commit, say)
with the same arguments, so a change of code is timed against its parent in one rotation.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def parse_test(t):
    m = re.fullmatch(r"(pp|tg)(\d+)(?:@(\d+))?", t)
    if not m:
        sys.exit(f"vs_llama: bad --test '{t}' (ppN, tgN or tgN@D)")
    kind, n, depth = m.group(1), int(m.group(2)), int(m.group(3) or 0)
    if kind == "pp" and depth:
        sys.exit("vs_llama: ppN@D is not supported")
    return kind, n, depth


def llama_once(a, kind, n, depth):
    cmd = [os.path.join(a.llama_bin, "llama-bench"), "-m", a.model, "-t", str(a.threads),
           "-fa", "1", "-r", "1", "-o", "json"]
    cmd += ["-p", str(n), "-n", "0"] if kind == "pp" else ["-p", "0", "-n", str(n)]
    if depth:
        cmd += ["-d", str(depth)]
    if a.no_warmup:
        cmd += ["--no-warmup"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def spattn_once(a, kind, n, depth, side_args, binary):
    prompt = n if kind == "pp" else max(depth, 1)
    gen = 1 if kind == "pp" else n + 1  # the first token comes from prefill's logits
    cmd = [binary, "run", "-m", a.model, "-f", a.text, "--max-prompt", str(prompt), "-n",
           str(gen), "-c", str(prompt + gen + 16), "-b", "2048", "-ub", "512", "-t",
           str(a.threads), "--ignore-eos", "--json"] + a.spattn_arg
    if not a.no_warmup:
        cmd += ["--warmup"]
    cmd += side_args
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if j["prompt_tokens"] != prompt:
        sys.exit(f"vs_llama: --text has only {j['prompt_tokens']} tokens, {prompt} needed")
    return float(j["prefill_tok_s"] if kind == "pp" else j["decode_tok_s"]), j


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bin", required=True, help="folder with llama-bench")
    p.add_argument("--spattn", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "bin", "spattn"))
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--test", action="append", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "shared", "models", "code-heldout.txt"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-warmup", action="store_true",
                   help="neither side warms up (llama-bench --no-warmup; spattn run without "
                   "--warmup)")
    p.add_argument("--spattn-arg", action="append", default=[],
                   help="one more argument for spattn run (repeat for several)")
    p.add_argument("--attn", action="append", default=[],
                   help="an attention method for spattn run: one spattn side each (repeat)")
    p.add_argument("--attn-decode", action="append", default=[],
                   help="a decode method for spattn run: one spattn side each (repeat)")
    p.add_argument("--spattn-build", action="append", default=[],
                   help="another spattn binary: one more side for each variant (repeat)")
    a = p.parse_args()
    methods = ([["--attn", x] for x in a.attn] + [["--attn-decode", x] for x in a.attn_decode]
               or [[]])
    # One side per (binary, method); the binary is named in the row only when several are timed.
    variants = [(b, m) for b in [a.spattn] + a.spattn_build for m in methods]
    rows = []
    for t in a.test:
        kind, n, depth = parse_test(t)
        ll, sp = [], [[] for _ in variants]
        rss = [0] * len(variants)
        dec = [[] for _ in variants]  # (decode attention ms per token, share of keys read)
        sides = list(range(len(variants) + 1))  # 0: llama-bench, i: variant i - 1
        for r in range(a.reps):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                if side == 0:
                    ll.append(llama_once(a, kind, n, depth))
                else:
                    v, j = spattn_once(a, kind, n, depth, variants[side - 1][1],
                                       variants[side - 1][0])
                    sp[side - 1].append(v)
                    rss[side - 1] = max(rss[side - 1],
                                        j.get("memory", {}).get("peak_rss_bytes", 0))
                    if kind == "tg" and j.get("decode_tokens"):
                        dec[side - 1].append((j["decode_attn_ms"] / j["decode_tokens"],
                                              j["decode_keys_read"] / j["decode_keys_total"]
                                              if j.get("decode_keys_total") else 1.0))
        for vi, (binary, side_args) in enumerate(variants):
            args = a.spattn_arg + side_args
            row = {"model": os.path.basename(a.model), "test": t, "threads": a.threads,
                   "llama_tok_s": ll, "spattn_tok_s": sp[vi],
                   "llama_median": statistics.median(ll),
                   "spattn_median": statistics.median(sp[vi])}
            row["ratio"] = row["spattn_median"] / row["llama_median"]
            if args:
                row["spattn_args"] = args
            if a.spattn_build:
                row["spattn_binary"] = binary
            if kind == "pp":
                row["llama_ttft_s"] = n / row["llama_median"]
                row["spattn_ttft_s"] = n / row["spattn_median"]
            if rss[vi]:
                row["spattn_peak_rss_bytes"] = rss[vi]
            if dec[vi]:
                row["decode_attn_ms_per_token"] = statistics.median(x for x, _ in dec[vi])
                row["decode_keys_read_share"] = statistics.median(y for _, y in dec[vi])
            rows.append(row)
            if not a.json:
                ttft = (f"  TTFT {row['llama_ttft_s']:.2f} s / {row['spattn_ttft_s']:.2f} s"
                        if kind == "pp" else "")
                extra = f"  [spattn {' '.join(args)}]" if args else ""
                if a.spattn_build:
                    extra += f"  [{binary}]"
                if dec[vi]:
                    extra += (f"  decode attention {row['decode_attn_ms_per_token']:.2f} ms/token,"
                              f" keys read {100 * row['decode_keys_read_share']:.1f}%")
                print(f"{row['model']:32s} {t:>12s} -t {a.threads}  llama.cpp "
                      f"{row['llama_median']:9.1f}  spattn {row['spattn_median']:9.1f} tok/s  "
                      f"ratio {row['ratio']:.2f}x{ttft}  (llama {', '.join(f'{x:.1f}' for x in ll)}"
                      f"; spattn {', '.join(f'{x:.1f}' for x in sp[vi])}){extra}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
