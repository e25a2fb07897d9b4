#!/usr/bin/env python3
"""Prefix reuse through `spattn serve` (issue 23's must-show), loopback only, bounded.

Starts `spattn serve -np 1` over a model and, for each attention (dense, chunked_h2o), sends a
chat of two turns as token prompts: turn 1 is N tokens of held-out code (streamed: the time
to its first token, and the largest gap between progress events and between any two events,
keep-alives included); turn 2 is turn 1, its answer and a new line, so the slot reuses what
it holds. Prints both turns' time to first token (the server's usage.spattn.ttft_ms, from
taking the slot) and the ratio, the tokens reused, and whether turn 2's greedy text equals
that of the same prompt prefilled afresh (cache_prompt: false). Exit status 0 when every
request succeeded and every reused answer equals the fresh one.

  scripts/serve_prefix_reuse.py --spattn build/bin/spattn \
      -m ../shared/models/code-small-32k.gguf --tokens 16000 -c 20480
"""
import argparse
import http.client
import json
import os
import sys
import time

import serve_client


def post(port, path, body):
    status, data = serve_client.post_json(port, path, body)
    if status != 200:
        sys.exit(f"{path}: status {status}: {data[:300]!r}")
    return json.loads(data)


def stream(port, body):
    """A streamed completion: text, usage, TTFT, when the first progress event came (the
    prefill's start), the largest gap between two progress events (through the prefill) and
    between any two events (keep-alive comments included) until the first text."""
    body = dict(body, stream=True)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    t0 = time.time()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"stream: status {r.status}")
    text, usage, first = "", None, None
    last_any, last_progress, first_progress = t0, None, None
    gap_any = gap_progress = 0.0
    progress = 0
    for now, ev in serve_client.sse_events(r):
        if first is None:
            gap_any = max(gap_any, now - last_any)
        last_any = now
        if ev.startswith(":") or ev == "data: [DONE]":
            continue
        j = json.loads(ev[6:])
        if "prompt_progress" in j:
            progress += 1
            if last_progress is None:
                first_progress = now - t0
            else:
                gap_progress = max(gap_progress, now - last_progress)
            last_progress = now
            continue
        if j["choices"] and j["choices"][0].get("text"):
            if first is None:
                first = now - t0
            text += j["choices"][0]["text"]
        if j.get("usage"):
            usage = j["usage"]
    c.close()
    return text, usage, first, first_progress, gap_progress, gap_any, progress


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spattn", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--text", help="default: code-heldout.txt beside the model")
    ap.add_argument("--tokens", type=int, default=16000)
    ap.add_argument("-c", "--ctx", type=int, default=20480)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--max-tokens", type=int, default=24)
    ap.add_argument("--attn", action="append", help="default: dense and chunked_h2o")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        print(f"{a.model}: absent, skipped")
        return 77
    attns = a.attn or ["dense", "chunked_h2o"]
    server, port = serve_client.start_server(
        a.spattn, a.model, ["-c", str(a.ctx), "-np", "1", "-t", str(a.threads), "--timeout", "1200"])
    ok = True
    try:
        path = a.text or os.path.join(os.path.dirname(a.model), "code-heldout.txt")
        text = open(path, encoding="utf-8", errors="replace").read()
        ids = post(port, "/tokenize", {"content": text})["tokens"]
        turn1 = ids[:a.tokens]
        new_line = post(port, "/tokenize", {"content": "\n# Now the tests:\n", "add_special": False})["tokens"]
        print(f"model {os.path.basename(a.model)}, turn 1 of {len(turn1)} tokens, -t {a.threads}")
        for attn in attns:
            base = {"max_tokens": a.max_tokens, "temperature": 0, "spattn": {"attn": attn}}
            t1, u1, ttft1_client, first_p, gap_p, gap_any, n_progress = stream(port, dict(base, prompt=turn1))
            answer = post(port, "/tokenize", {"content": t1, "add_special": False})["tokens"]
            turn2 = turn1 + answer + new_line
            r2 = post(port, "/v1/completions", dict(base, prompt=turn2))
            u2 = r2["usage"]
            fresh = post(port, "/v1/completions", dict(base, prompt=turn2, cache_prompt=False))
            same = r2["choices"][0]["text"] == fresh["choices"][0]["text"]
            ok = ok and same
            s1, s2, sf = u1["spattn"], u2["spattn"], fresh["usage"]["spattn"]
            print(f"{attn}: turn 1 TTFT {s1['ttft_ms'] / 1e3:.2f} s (client {ttft1_client or float('nan'):.2f} s; "
                  f"{n_progress} progress events from {first_p:.2f} s on, largest gap between them {gap_p:.2f} s, "
                  f"between any events {gap_any:.2f} s; "
                  f"prefill {s1['prefill']}, skipped {s1['skipped_fraction']:.3f})")
            print(f"{attn}: turn 2 ({u2['prompt_tokens']} tokens, {u2['prompt_tokens_details']['cached_tokens']} "
                  f"from the cache) TTFT {s2['ttft_ms'] / 1e3:.3f} s: {s1['ttft_ms'] / s2['ttft_ms']:.1f}x sooner "
                  f"than turn 1; fresh turn 2 TTFT {sf['ttft_ms'] / 1e3:.2f} s "
                  f"({sf['ttft_ms'] / s2['ttft_ms']:.1f}x); reused text == fresh text: {same}")
    finally:
        serve_client.stop_server(server)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
