#!/usr/bin/env python3
"""spattn's runner against llama.cpp on one GGUF model, for the architecture checks of issue 21:
greedy text (llama-completion --temp 0 against spattn run --temp 0) and perplexity
(llama-perplexity against spattn perplexity) at each -c given.

  scripts/arch_vs_llama.py --llama-bin DIR -m MODEL.gguf [--quantize Q4_K_M]
      [--prompt TEXT] [-n 64] [--text FILE] [-c 1024 -c 4096] [--chunks N] [-t 2]
      [--near-tie 0.1] [--json]

With --quantize TYPE the model is first written again by llama-quantize (next to it, with the
type in its name) and both sides run that file. Greedy: equal texts pass; where they part, the
token where they part is found from spattn's --json piece_ends, and the step passes only as a
near tie: spattn's top two logits there less than --near-tie apart (its logit_gaps), or as a
step that rounding alone decides: spattn run again with an f32 KV cache (-ctk f32 -ctv f32,
the same model computed with less rounding) parts from its own f16-cache text at the same
token(s), or llama.cpp's text with -fa off (its own rounding without flash attention's f16
queries) parts from its default text there. The report says which (-n 0: no greedy check). llama-completion prints the prompt before the text (taken off) and runs 8
tokens longer, against its logger's lost tails (below). Perplexity: spattn's must lie within llama-perplexity's +/- of its value
(and with --ppl-rel F within F of it).
Both sides run their defaults otherwise (f16 KV cache; llama.cpp's flash attention on auto).
--spattn-attn may be given more than once (dense, dsa): each is checked against one run of
llama.cpp's, and spattn perplexity's run with a sparse spec reports its dense figure too, so
dense and dsa cost one run of each side.

Exit status: 0 all checks pass, 1 a check fails, 77 llama.cpp's tools are not in --llama-bin,
the text is absent, or a llama-perplexity run never printed its final estimate (llama.cpp's
logger loses its last lines at exit on a loaded machine) and nothing failed (a test harness
reads 77 as skipped).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import llama_log_flush


def sh(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, env=env)
    if r.returncode != 0:
        sys.exit(f"arch_vs_llama: {' '.join(cmd)} failed ({r.returncode}):\n"
                 f"{r.stderr.decode(errors='replace')[-3000:]}")
    return r


LOG_FLUSH = None  # llama_log_flush's library, preloaded into llama.cpp's tools if built


def spattn_run(a, model, extra=()):
    attn = ["--attn", a.attn, "--attn-decode", a.attn] if a.attn else []
    return json.loads(sh([a.spattn, "run", "-m", model, "-p", a.prompt, "-n", str(a.n), "--temp",
                          "0", "-t", str(a.threads), "-c", "4096", "--json", *attn,
                          *extra]).stdout)


LLAMA_TEXTS = {}  # llama_text's answers, by model and extra arguments (one run per check)


def llama_text(a, model, extra=()):
    """llama-completion's greedy text after the prompt (n + 8 tokens: greedy() says why)."""
    key = (model, tuple(extra))
    if key not in LLAMA_TEXTS:
        LLAMA_TEXTS[key] = llama_text_run(a, model, extra)
    return LLAMA_TEXTS[key]


def llama_text_run(a, model, extra=()):
    ll = sh([os.path.join(a.llama_bin, "llama-completion"), "-m", model, "-p", a.prompt, "-n",
             str(a.n + 8), "--temp", "0", "-t", str(a.threads), "-no-cnv", "--simple-io",
             "--no-warmup", "-c", "4096", *extra], llama_log_flush.env_with(LOG_FLUSH))
    text = ll.stdout.decode("utf-8", errors="replace")
    return text[len(a.prompt):] if text.startswith(a.prompt) else text


def greedy(a, model):
    sp = spattn_run(a, model)
    mine = sp["text"]
    # llama.cpp prints the text through its logger's worker thread, which may lose the last
    # lines at exit on a loaded machine (llama_log_flush.py: the wait at exit preloaded):
    # llama-completion generates 8 tokens more than compared, and a text that still ends short
    # of spattn's is a lost tail, so the run is repeated (up to three times).
    for _ in range(3):
        text = llama_text(a, model)
        if len(text.encode()) > len(mine.encode()) or not mine.startswith(text):
            break
        LLAMA_TEXTS.pop((model, ()), None)  # a lost tail: run it again
    # spattn's n tokens against the start of llama.cpp's n + 8.
    if text.startswith(mine):
        text = mine
    row = {"model": os.path.basename(model), "check": "greedy", "tokens": a.n,
           "attn": a.attn or "dense", "llama": text, "spattn": mine, "equal": text == mine}
    if not row["equal"]:
        # The first byte where they part, and spattn's token that holds it (texts compared as
        # UTF-8 with bad bytes replaced on both sides; piece_ends are byte offsets).
        lb, sb = text.encode(), mine.encode()
        k = next((i for i in range(min(len(lb), len(sb))) if lb[i] != sb[i]), min(len(lb), len(sb)))
        # A run of replacement characters just before k (a byte-level vocabulary's tokens that
        # are parts of a UTF-8 sequence) hides which bytes each side wrote: the texts may have
        # parted anywhere in it, so every token from the run's start to k is a candidate and
        # the smallest of their gaps decides.
        bad = "\ufffd".encode()
        k0 = k
        while k0 >= len(bad) and sb[k0 - len(bad):k0] == bad and lb[k0 - len(bad):k0] == bad:
            k0 -= len(bad)
        token_at = lambda b: next((i for i, e in enumerate(sp["piece_ends"]) if e > b),
                                  len(sp["piece_ends"]) - 1)
        tok0, tok = token_at(k0), token_at(k)
        gaps = [g for g in sp["logit_gaps"][tok0:tok + 1]]
        gap = min(gaps) if gaps else None
        row.update({"part_byte": k, "part_token": tok, "spattn_gap": gap,
                    "near_tie": gap is not None and gap < a.near_tie})
        if tok0 < tok:
            row["hidden_from_token"] = tok0
        if not row["near_tie"]:
            # Does rounding alone flip this step? spattn with an f32 cache against itself.
            fb = spattn_run(a, model, ("-ctk", "f32", "-ctv", "f32"))["text"].encode()
            j = next((i for i in range(min(len(fb), len(sb))) if fb[i] != sb[i]), None)
            row["f32_cache_part_byte"] = j
            row["rounding"] = j is not None and tok0 <= token_at(j) <= tok
        if not row["near_tie"] and not row["rounding"]:
            # Or llama.cpp's: its flash attention (on by default; f16 queries and f16 sums of
            # the values on the CPU) against its own text without it.
            ob = llama_text(a, model, ("-fa", "off")).encode(errors="replace")
            j = next((i for i in range(min(len(ob), len(lb))) if ob[i] != lb[i]), None)
            row["llama_fa_off_part_byte"] = j
            row["llama_rounding"] = j is not None and tok0 <= token_at(j) <= tok
    row["pass"] = (row["equal"] or row["near_tie"] or row.get("rounding", False)
                   or row.get("llama_rounding", False))
    return row


PPL = re.compile(rb"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def perplexity(a, model, c):
    """One row an --spattn-attn spec, against one llama-perplexity run."""
    cmd = [os.path.join(a.llama_bin, "llama-perplexity"), "-m", model, "-f", a.text, "-c", str(c),
           "-t", str(a.threads)]
    if a.chunks > 0:
        cmd += ["--chunks", str(a.chunks)]
    # The final estimate comes through llama.cpp's log thread (llama_log_flush.py: the wait at
    # exit preloaded); a run that still loses the line is repeated, up to five times, and if it
    # never comes the check is reported as not made (exit 77 when nothing else failed).
    env = llama_log_flush.env_with(LOG_FLUSH)
    for _ in range(5):
        r = sh(cmd, env)
        m = PPL.search(r.stdout + b"\n" + r.stderr)
        if m:
            break
    if not m:
        return [{"model": os.path.basename(model), "check": "perplexity", "ctx": c,
                 "chunks": a.chunks, "lost": True, "pass": True}]
    lp, le = float(m.group(1)), float(m.group(2))
    # spattn's prefill with each sparse SPEC (beside its dense one, also reported); dense alone
    # when no sparse spec is asked for.
    sparse = [s for s in a.attns if s not in ("", "dense")]
    results = {}
    for mode in ([["--attn", s] for s in sparse] or [["--dense-only"]]):
        cmd = [a.spattn, "perplexity", "-m", model, "-f", a.text, "-c", str(c), "-t",
               str(a.threads), *mode, "--json", *a.spattn_ppl_arg]
        if a.chunks > 0:
            cmd += ["--chunks", str(a.chunks)]
        results.update(json.loads(sh(cmd).stdout)["results"])
    rows = []
    for attn in a.attns:
        mine = results[attn or "dense"]["ppl"]
        rows.append({"model": os.path.basename(model), "check": "perplexity", "ctx": c,
                     "chunks": a.chunks, "llama": lp, "llama_err": le, "spattn": mine,
                     "attn": attn or "dense", "spattn_dense": results["dense"]["ppl"],
                     "pass": abs(mine - lp) <= le and (a.ppl_rel <= 0 or
                                                       abs(mine - lp) <= a.ppl_rel * lp)})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bin", required=True, help="folder with llama-completion, "
                   "llama-perplexity and llama-quantize")
    p.add_argument("--spattn", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "bin", "spattn"))
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--quantize", help="llama-quantize type to run instead (Q4_K_M, ...)")
    p.add_argument("--prompt", default="def main():\n    parser = argparse")
    p.add_argument("-n", type=int, default=64, help="greedy tokens compared (0: no greedy check)")
    p.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "shared", "models", "code-heldout.txt"))
    p.add_argument("-c", "--ctx", type=int, action="append", default=[])
    p.add_argument("--chunks", type=int, default=-1, help="windows per perplexity (-1: all)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--near-tie", type=float, default=0.1,
                   help="a parting step passes when spattn's top two logits are closer than this")
    p.add_argument("--ppl-rel", type=float, default=0,
                   help="perplexity also within this fraction of llama.cpp's (0: its +/- only)")
    p.add_argument("--spattn-ppl-arg", action="append", default=[],
                   help="an argument for spattn perplexity (e.g. -ub 15: every product on ggml's "
                   "path, as llama.cpp's, below the 16 rows spattn's 8-bit kernel takes)")
    p.add_argument("--spattn-attn", action="append", default=[],
                   help="spattn's attention in prefill and decode (--attn, --attn-decode), "
                   "e.g. dsa: a natively sparse model's own selection (default: dense); more "
                   "than one: each checked (--spattn-attn dense --spattn-attn dsa)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    tools = ["llama-completion", "llama-perplexity"] + (["llama-quantize"] if a.quantize else [])
    if not all(os.access(os.path.join(a.llama_bin, t), os.X_OK) for t in tools):
        print(f"arch_vs_llama: llama.cpp's tools are not in {a.llama_bin}: skipped")
        sys.exit(77)
    if not os.path.isfile(a.text):
        print(f"arch_vs_llama: {a.text} absent: skipped")
        sys.exit(77)
    global LOG_FLUSH
    scratch = tempfile.TemporaryDirectory(prefix="arch_vs_llama.")
    LOG_FLUSH = llama_log_flush.build(scratch.name)
    model = a.model
    if a.quantize:
        base, _ = os.path.splitext(a.model)
        model = f"{base}-{a.quantize}.gguf"
        sh([os.path.join(a.llama_bin, "llama-quantize"), a.model, model, a.quantize])
    # "": spattn's defaults (run: the model's own attention; perplexity: dense).
    a.attns = list(dict.fromkeys(a.spattn_attn or [""]))
    rows = []
    if a.n > 0:
        for attn in a.attns:
            a.attn = attn
            rows.append(greedy(a, model))
    for c in (a.ctx or [1024]):
        rows += perplexity(a, model, c)
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            if r["check"] == "greedy":
                how = ("equal" if r["equal"] else
                       f"part at byte {r['part_byte']}, token {r['part_token']}"
                       + (f" (bytes hidden by U+FFFD from token {r['hidden_from_token']})"
                          if "hidden_from_token" in r else "")
                       + f": spattn's top two logits {r['spattn_gap']:.4f} apart ("
                       + ("near tie" if r["near_tie"] else "NOT a near tie") + ")"
                       + ("" if r["near_tie"] else
                          "; spattn with an f32 cache parts from its f16 text there too "
                          "(rounding decides the step)" if r.get("rounding") else
                          "; llama.cpp with -fa off parts from its own text there too "
                          "(its rounding decides the step)" if r.get("llama_rounding") else
                          f"; spattn with an f32 cache parts at byte "
                          f"{r.get('f32_cache_part_byte')}, llama.cpp with -fa off at byte "
                          f"{r.get('llama_fa_off_part_byte')}: NOT rounding"))
                print(f"{r['model']}: greedy {r['tokens']} tokens ({r['attn']}): {how}")
            elif r.get("lost"):
                print(f"{r['model']}: perplexity -c {r['ctx']}: not compared, llama-perplexity's "
                      "final estimate was lost five times (llama.cpp's logger at exit)")
            else:
                print(f"{r['model']}: perplexity -c {r['ctx']}: llama.cpp {r['llama']:.4f} +/- "
                      f"{r['llama_err']:.5f}, spattn {r['spattn']:.4f}"
                      + (f" ({r['attn']}; dense {r['spattn_dense']:.4f})"
                         if r["attn"] != "dense" else "")
                      + ("" if r["pass"] else "  OUTSIDE the bound"))
    if not all(r["pass"] for r in rows):
        sys.exit(1)
    sys.exit(77 if any(r.get("lost") for r in rows) else 0)


if __name__ == "__main__":
    main()
