#!/usr/bin/env python3
"""spattn's runner against llama.cpp on the same GGUF file, threads and machine, timed
round-robin: llama-bench once, spattn once, llama-bench once, ... (the order flips every
round), so drift in the machine's speed lands on both. Prints the medians and their ratio.

  scripts/vs_llama.py --llama-bin DIR -m MODEL.gguf --test pp512 [--test tg128 ...]
      [--test tg32@16384] [--test pp32768+tg16] [--reps 3] [-t 2] [--text FILE] [--json]
      [--attn dense --attn chunked_h2o ...] [--attn-decode quest ...]
      [--spattn-arg=-ctk --spattn-arg=q8_0 ...] [--spattn-build OLD/bin/spattn ...]

Tests, as llama-bench names them: ppN (prefill of N tokens, llama-bench -p N -n 0), tgN
(N decode steps from an empty context, -p 0 -n N), tgN@D (N decode steps after D tokens,
-n N -d D), ppN+tgM (a prefill of N tokens, then M decode steps at depth N: one prefill
on each side for both figures, printed as the rows ppN and tgM@N; llama.cpp's side is
llama-batched-bench -npp N -ntg M -npl 1, since llama-bench prefills its depth again for the
tg row, and at 32K one llama.cpp prefill of a 128-head latent attention took 80 minutes on
2 cores). Both sides warm up first (llama-bench's warm-up run; spattn run --warmup), unless
--no-warmup: then neither does, for rows where one warm-up is as long as the timed run (a 16K
prompt through a 128-head latent attention takes llama.cpp most of 20 minutes on 2 cores).
llama-bench runs with its defaults (-b 2048 -ub 512, f16 KV cache) plus -fa 1,
llama-batched-bench with the same; its only warm-up is 16 tokens, so ppN+tgM needs
--no-warmup. spattn run with the same -b/-ub, dense attention unless --spattn-arg says
otherwise (each --spattn-arg is appended to spattn run's command line: a method, -ub, a cache
type), greedy, --ignore-eos. For ppN both sides' time to first token (N / tokens per second)
is printed too, and the share of spattn's prefill time its attention took. Each --attn
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
import tempfile
import time

import llama_log_flush


def parse_test(t):
    """(kind, n, depth, rows): kind pp, tg or pptg; rows the names the test's figures print
    under."""
    m = re.fullmatch(r"pp(\d+)\+tg(\d+)", t)
    if m:
        n, steps = int(m.group(1)), int(m.group(2))
        if steps < 1:
            sys.exit(f"vs_llama: bad --test '{t}' (ppN+tgM needs M >= 1)")
        return "pptg", steps, n, [f"pp{n}", f"tg{steps}@{n}"]
    m = re.fullmatch(r"(pp|tg)(\d+)(?:@(\d+))?", t)
    if not m:
        sys.exit(f"vs_llama: bad --test '{t}' (ppN, tgN, tgN@D or ppN+tgM)")
    kind, n, depth = m.group(1), int(m.group(2)), int(m.group(3) or 0)
    if kind == "pp" and depth:
        sys.exit("vs_llama: ppN@D is not supported")
    return kind, n, depth, [t]


LOST_RECORDS = [0]  # llama-batched-bench runs repeated for a record the log lost
LLAMA_RUNS = 6  # llama-batched-bench runs at most for one record
LOG_FLUSH = None  # llama_log_flush's library, preloaded into llama-batched-bench if built


def llama_once(a, kind, n, depth, rows):
    """{row: tok/s} of one llama.cpp run."""
    common = ["-m", a.model, "-t", str(a.threads), "-fa", "1"]
    if kind == "pptg":
        # One prefill of `depth` tokens, then n decode steps (llama-batched-bench's PP and TG).
        cmd = [os.path.join(a.llama_bin, "llama-batched-bench")] + common + [
            "-c", str(depth + n), "-b", "2048", "-ub", "512", "-npp", str(depth), "-ntg", str(n),
            "-npl", "1", "--output-format", "jsonl"]
        # llama-batched-bench prints its record through llama.cpp's log thread, which a loaded
        # machine can leave unwritten at exit (llama_log_flush.py: the wait at exit preloaded).
        # A run that still loses it is repeated (five times at most, a little later each time,
        # for the load to pass); a record is read from its first '{"' (a log line may share its
        # line).
        env = llama_log_flush.env_with(LOG_FLUSH)
        for attempt in range(LLAMA_RUNS):
            if attempt:
                time.sleep(0.25 * attempt)
            run = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
            recs = [json.loads(x[x.index('{"'):]) for x in run.stdout.splitlines() if '{"' in x]
            if recs:
                j = recs[-1]
                return {rows[0]: float(j["speed_pp"]), rows[1]: float(j["speed_tg"])}
            LOST_RECORDS[0] += 1  # reported in the rows (llama_lost_records)
        sys.exit(f"vs_llama: llama-batched-bench printed no JSON record in {LLAMA_RUNS} runs; "
                 "its output ends:\n" + run.stdout[-1500:] + run.stderr[-1500:])
    cmd = [os.path.join(a.llama_bin, "llama-bench")] + common + ["-r", "1", "-o", "json"]
    cmd += ["-p", str(n), "-n", "0"] if kind == "pp" else ["-p", "0", "-n", str(n)]
    if depth:
        cmd += ["-d", str(depth)]
    if a.no_warmup:
        cmd += ["--no-warmup"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {rows[0]: float(json.loads(out)[0]["avg_ts"])}


def spattn_once(a, kind, n, depth, rows, side_args, binary):
    """({row: tok/s}, spattn's --json) of one spattn run."""
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
    if kind == "pptg":
        return {rows[0]: float(j["prefill_tok_s"]), rows[1]: float(j["decode_tok_s"])}, j
    return {rows[0]: float(j["prefill_tok_s"] if kind == "pp" else j["decode_tok_s"])}, j


def print_row(a, row, args, binary, prefill):
    ll, sp = row["llama_tok_s"], row["spattn_tok_s"]
    ttft = (f"  TTFT {row['llama_ttft_s']:.2f} s / {row['spattn_ttft_s']:.2f} s" if prefill
            else "")
    extra = f"  [spattn {' '.join(args)}]" if args else ""
    if a.spattn_build:
        extra += f"  [{binary}]"
    if "spattn_attn_share" in row:
        extra += f"  attention {100 * row['spattn_attn_share']:.0f}% of prefill"
    if "decode_attn_ms_per_token" in row:
        extra += (f"  decode attention {row['decode_attn_ms_per_token']:.2f} ms/token,"
                  f" keys read {100 * row['decode_keys_read_share']:.1f}%")
    print(f"{row['model']:32s} {row['test']:>12s} -t {a.threads}  llama.cpp "
          f"{row['llama_median']:9.1f}  spattn {row['spattn_median']:9.1f} tok/s  "
          f"ratio {row['ratio']:.2f}x{ttft}  (llama {', '.join(f'{x:.1f}' for x in ll)}"
          f"; spattn {', '.join(f'{x:.1f}' for x in sp)}){extra}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bin", required=True,
                   help="folder with llama-bench (and llama-batched-bench for ppN+tgM)")
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
    global LOG_FLUSH
    scratch = tempfile.TemporaryDirectory(prefix="vs_llama.")
    LOG_FLUSH = llama_log_flush.build(scratch.name)
    methods = ([["--attn", x] for x in a.attn] + [["--attn-decode", x] for x in a.attn_decode]
               or [[]])
    # One side per (binary, method); the binary is named in the row only when several are timed.
    variants = [(b, m) for b in [a.spattn] + a.spattn_build for m in methods]
    tests = [parse_test(t) for t in a.test]  # all checked before the first (long) run
    for t, (kind, _, _, _) in zip(a.test, tests):
        if kind == "pptg" and not a.no_warmup:
            sys.exit(f"vs_llama: --test {t} needs --no-warmup (llama-batched-bench has no "
                     "warm-up run)")
    rows = []
    for kind, n, depth, names in tests:
        ll = {x: [] for x in names}
        sp = [{x: [] for x in names} for _ in variants]
        rss = [0] * len(variants)
        dec = [[] for _ in variants]  # (decode attention ms per token, share of keys read)
        share = [[] for _ in variants]  # prefill's attention share of its time
        sides = list(range(len(variants) + 1))  # 0: llama.cpp, i: variant i - 1
        for r in range(a.reps):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                if side == 0:
                    for x, v in llama_once(a, kind, n, depth, names).items():
                        ll[x].append(v)
                    continue
                got, j = spattn_once(a, kind, n, depth, names, variants[side - 1][1],
                                     variants[side - 1][0])
                for x, v in got.items():
                    sp[side - 1][x].append(v)
                rss[side - 1] = max(rss[side - 1], j.get("memory", {}).get("peak_rss_bytes", 0))
                if kind != "tg" and "attn_share" in j:
                    share[side - 1].append(j["attn_share"])
                if kind != "pp" and j.get("decode_tokens"):
                    dec[side - 1].append((j["decode_attn_ms"] / j["decode_tokens"],
                                          j["decode_keys_read"] / j["decode_keys_total"]
                                          if j.get("decode_keys_total") else 1.0))
        for name in names:
            prefill = name.startswith("pp")
            for vi, (binary, side_args) in enumerate(variants):
                args = a.spattn_arg + side_args
                row = {"model": os.path.basename(a.model), "test": name, "threads": a.threads,
                       "llama_tok_s": ll[name], "spattn_tok_s": sp[vi][name],
                       "llama_median": statistics.median(ll[name]),
                       "spattn_median": statistics.median(sp[vi][name])}
                row["ratio"] = row["spattn_median"] / row["llama_median"]
                if kind == "pptg":
                    row["llama_tool"] = "llama-batched-bench"
                    if LOST_RECORDS[0]:
                        row["llama_lost_records"] = LOST_RECORDS[0]
                if args:
                    row["spattn_args"] = args
                if a.spattn_build:
                    row["spattn_binary"] = binary
                if prefill:
                    n_prompt = n if kind == "pp" else depth
                    row["llama_ttft_s"] = n_prompt / row["llama_median"]
                    row["spattn_ttft_s"] = n_prompt / row["spattn_median"]
                    if share[vi]:
                        row["spattn_attn_share"] = statistics.median(share[vi])
                if rss[vi]:
                    row["spattn_peak_rss_bytes"] = rss[vi]
                if dec[vi] and not prefill:
                    row["decode_attn_ms_per_token"] = statistics.median(x for x, _ in dec[vi])
                    row["decode_keys_read_share"] = statistics.median(y for _, y in dec[vi])
                rows.append(row)
                if not a.json:
                    print_row(a, row, args, binary, prefill)
    if a.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
