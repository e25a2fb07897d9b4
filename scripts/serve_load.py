#!/usr/bin/env python3
"""Load test of `spattn serve` (issue 23's must-show), bounded and loopback only.

Starts `spattn serve --port 0` on 127.0.0.1 over a model, then runs CLIENTS threads for SECONDS:
each sends, one after another, short prompts and long ones (LONG tokens of held-out code, four
different documents, so a slot's cache sometimes holds a prefix), streamed or not, with
malformed requests mixed in (bad JSON, a negative max_tokens, a prompt over the context, a
wrong type, invalid UTF-8). It checks that every request is answered, that every answer is
well formed (a completion object, or an SSE stream of chunks ending in [DONE] with usage), and
that every malformed request gets a 400 with an OpenAI-style error object; then prints the
counts, p50/p99 time to first token (client side, for streams: from sending to the first text)
and the decode rate the server reports. Exit status 0 only when nothing failed or was lost.

Requests still running at the deadline are waited for, at most DRAIN seconds; then the
server is stopped (SIGTERM) and the script ends. Python's standard library only.

  scripts/serve_load.py --spattn build/bin/spattn -m ../shared/models/code-tiny-8k.gguf \
      --clients 32 --seconds 60 --long 7800 -c 8192 -np 4
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

import serve_client

SHORT = [
    "def main():\n",
    "import os\nimport sys\n\n",
    "class Parser:\n    def __init__(self, text):\n",
    "#include <stdio.h>\n\nint main(void) {\n",
    "Once upon a time",
    "for i in range(10):\n    print(",
]


def start_server(a):
    args = ["-c", str(a.ctx), "-np", str(a.slots), "--queue", str(a.clients), "-t", str(a.threads),
            "--timeout", "600", "--metrics"]
    if a.attn:
        args += ["--attn", a.attn]
    return serve_client.start_server(a.spattn, a.model, args)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.ttft = []  # seconds, client side, streams
        self.server_ttft = []  # seconds, usage.spattn.ttft_ms
        self.decode_rate = []  # tokens/s after the first, from usage
        self.cached = 0
        self.prompt_tokens = 0

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def fail(self, what):
        with self.lock:
            self.failures.append(what)


def check_usage(u, where):
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if not isinstance(u.get(k), int) or u[k] < 0:
            raise ValueError(f"{where}: usage.{k} missing or negative: {u}")
    if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
        raise ValueError(f"{where}: usage totals do not add up: {u}")


def record_usage(st, u):
    sp = u.get("spattn", {})
    with st.lock:
        st.prompt_tokens += u["prompt_tokens"]
        st.cached += u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        if "ttft_ms" in sp:
            st.server_ttft.append(sp["ttft_ms"] / 1e3)
        if u["completion_tokens"] > 1 and sp.get("decode_ms", 0) > 0:
            st.decode_rate.append((u["completion_tokens"] - 1) / (sp["decode_ms"] / 1e3))


def request(port, body_bytes, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.time()
    c.request("POST", "/v1/completions", body=body_bytes,
              headers={"Content-Type": "application/json"})
    return c, c.getresponse(), t0


def good_request(port, body, st, timeout):
    c, r, t0 = request(port, json.dumps(body).encode(), timeout)
    try:
        if r.status != 200:
            raise ValueError(f"status {r.status}: {r.read()[:200]!r}")
        if not body.get("stream"):
            j = json.loads(r.read())
            if j.get("object") != "text_completion" or not isinstance(j["choices"][0]["text"], str):
                raise ValueError(f"not a completion: {str(j)[:200]}")
            if j["choices"][0]["finish_reason"] not in ("stop", "length"):
                raise ValueError(f"finish_reason {j['choices'][0]['finish_reason']}")
            check_usage(j["usage"], "completion")
            record_usage(st, j["usage"])
            return
        first = None
        usage = None
        done = False
        for now, ev in serve_client.sse_events(r):
            if ev.startswith(":"):
                continue  # keep-alive
            if not ev.startswith("data: "):
                raise ValueError(f"not an SSE event: {ev[:100]!r}")
            d = ev[6:]
            if done:
                raise ValueError("data after [DONE]")
            if d == "[DONE]":
                done = True
                continue
            j = json.loads(d)
            if "error" in j:
                raise ValueError(f"error event: {d[:200]}")
            if "prompt_progress" in j:
                continue
            if j.get("object") != "text_completion":
                raise ValueError(f"not a chunk: {d[:200]}")
            if first is None and j["choices"] and j["choices"][0].get("text"):
                first = now - t0
            if j.get("usage"):
                usage = j["usage"]
        if not done or usage is None:
            raise ValueError(f"stream ended without [DONE] and usage (done={done})")
        check_usage(usage, "stream")
        record_usage(st, usage)
        with st.lock:
            # A stream whose first token ends it (no text) has no client-side TTFT.
            if first is not None:
                st.ttft.append(first)
    finally:
        c.close()


def malformed(port, ctx, rng, timeout):
    kind = rng.choice(["json", "negative", "too_long", "type", "utf8"])
    if kind == "json":
        b = b'{"prompt": "x", "max_tokens": '
    elif kind == "negative":
        b = json.dumps({"prompt": "x", "max_tokens": -5}).encode()
    elif kind == "too_long":
        b = json.dumps({"prompt": list(range(1, 100)) * (ctx // 99 + 2)}).encode()
    elif kind == "type":
        b = json.dumps({"prompt": {"not": "a prompt"}}).encode()
    else:
        b = b'{"prompt": "caf\xc3\x28 bad", "max_tokens": 2}'
    c, r, _ = request(port, b, timeout)
    try:
        body = r.read()
        if r.status != 400:
            raise ValueError(f"malformed ({kind}) got {r.status}: {body[:200]!r}")
        e = json.loads(body).get("error", {})
        if not isinstance(e.get("message"), str) or not isinstance(e.get("type"), str):
            raise ValueError(f"malformed ({kind}): not an error object: {body[:200]!r}")
    finally:
        c.close()


def client(i, a, port, docs, st, deadline):
    rng = random.Random(1000 + i)
    while time.time() < deadline:
        roll = rng.random()
        try:
            if roll < a.malformed:
                st.count("malformed")
                malformed(port, a.ctx, rng, a.drain + a.seconds)
                continue
            stream = rng.random() < 0.5
            if roll < a.malformed + a.long_share:
                st.count("long")
                doc = rng.choice(docs)
                body = {"prompt": doc, "max_tokens": a.max_tokens}
            else:
                st.count("short")
                body = {"prompt": rng.choice(SHORT), "max_tokens": a.max_tokens}
            body["temperature"] = rng.choice([0, 0.8])
            body["seed"] = rng.randrange(1 << 30)
            body["stream"] = stream
            good_request(port, body, st, a.drain + a.seconds)
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            st.fail(f"client {i}: {type(e).__name__}: {e}")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spattn", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--text", help="held-out text for long prompts (default: code-heldout.txt beside the model)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--drain", type=float, default=600, help="at most this long for requests running at the deadline")
    ap.add_argument("--long", type=int, default=7800, help="tokens of a long prompt (0: none)")
    ap.add_argument("--long-share", type=float, default=0.15)
    ap.add_argument("--malformed", type=float, default=0.1)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("-np", "--slots", type=int, default=4)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--attn", default="")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        print(f"{a.model}: absent, skipped")
        return 77  # ctest's SKIP_RETURN_CODE
    if a.long == 0:
        a.long_share = 0

    server, port = start_server(a)
    try:
        docs = []
        if a.long_share > 0:
            path = a.text or os.path.join(os.path.dirname(a.model), "code-heldout.txt")
            text = open(path, encoding="utf-8", errors="replace").read()
            ids = json.loads(serve_client.post_json(port, "/tokenize", {"content": text}, 120)[1])["tokens"]
            step = max(1, (len(ids) - a.long) // 4)
            docs = [ids[k * step:k * step + a.long] for k in range(4)]
            if any(len(d) < a.long for d in docs):
                sys.exit(f"{path}: too little text for {a.long}-token prompts")
        st = Stats()
        t0 = time.time()
        deadline = t0 + a.seconds
        threads = [threading.Thread(target=client, args=(i, a, port, docs, st, deadline))
                   for i in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline + a.drain - time.time()))
        lost = sum(t.is_alive() for t in threads)
        wall = time.time() - t0
    finally:
        serve_client.stop_server(server)

    n = sum(st.counts.values())
    print(f"spattn serve load: {a.clients} clients, {a.seconds:.0f} s (+ {wall - a.seconds:.1f} s to drain), "
          f"-np {a.slots}, -t {a.threads}, attn {a.attn or 'server default'}, model {os.path.basename(a.model)}")
    print(f"requests: {n} ({', '.join(f'{k} {v}' for k, v in sorted(st.counts.items()))}); "
          f"failed {len(st.failures)}, lost {lost}")
    print(f"prompt tokens {st.prompt_tokens}, of them from a slot's cache {st.cached}")
    print(f"TTFT client-side (streams, n={len(st.ttft)}): p50 {pct(st.ttft, 50):.3f} s, p99 {pct(st.ttft, 99):.3f} s")
    print(f"TTFT server-side (from taking a slot, n={len(st.server_ttft)}): "
          f"p50 {pct(st.server_ttft, 50):.3f} s, p99 {pct(st.server_ttft, 99):.3f} s")
    if st.decode_rate:
        print(f"decode rate per request (tokens/s after the first, n={len(st.decode_rate)}): "
              f"p50 {pct(st.decode_rate, 50):.1f}, p1 {pct(st.decode_rate, 1):.1f}, "
              f"mean {statistics.mean(st.decode_rate):.1f}")
    for f in st.failures[:20]:
        print("FAIL", f)
    ok = not st.failures and lost == 0 and n > 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
