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

Beside the clients, as an attacker on the same machine would (issue 59): --slowloris N sockets
each sending a request's headers one byte a second, reconnecting whenever the server closes
them, and --abandon N streamed requests whose client reads the first event and hangs up,
spread over the run. While they run, /health is asked every second and must answer within
HEALTH_S seconds, and the server's resident memory is sampled: the script prints it idle
(before the load), after the first quarter of the run, at its peak and at the end, and fails
when the end is more than --rss-growth-mb above the first quarter's (a leak, not the caches'
first fill) when given.

  scripts/serve_load.py --spattn build/bin/spattn -m $MODELS/code-tiny-8k.gguf \
      --clients 32 --seconds 60 --long 7800 -c 8192 -np 4
  scripts/serve_load.py --spattn build/bin/spattn -m $MODELS/code-tiny-8k.gguf \
      --clients 8 --seconds 120 --long 2000 -c 4096 -np 4 --slowloris 50 --abandon 100 --rss-growth-mb 32
"""
import argparse
import http.client
import json
import os
import random
import socket
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
    # Each abandoning thread may hold a queue place until the server sees its client gone.
    queue = a.clients + (ABANDONERS if a.abandon else 0)
    args = ["-c", str(a.ctx), "-np", str(a.slots), "--queue", str(queue), "-t", str(a.threads),
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
        self.health = []  # seconds for /health to answer

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


ABANDONERS = 4  # threads sending the abandoned streams


def abandoner(i, a, port, st, deadline):
    """Streams whose client reads the first event (or nothing) and hangs up: --abandon of them
    in all, spread over the run."""
    rng = random.Random(2000 + i)
    mine = a.abandon // ABANDONERS + (1 if i < a.abandon % ABANDONERS else 0)
    # Spread over the first 80% of the run, so every one is sent before the deadline.
    gap = 0.8 * a.seconds / max(1, mine)
    for k in range(mine):
        body = {"prompt": rng.choice(SHORT), "max_tokens": 256, "stream": True,
                "temperature": 0.8, "seed": rng.randrange(1 << 30)}
        try:
            c, r, _ = request(port, json.dumps(body).encode(), a.drain + a.seconds)
            if r.status != 200:
                raise ValueError(f"abandoned stream got status {r.status}: {r.read()[:200]!r}")
            if k % 2 == 0:
                r.read1(1)  # half of them read something first
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            st.count("abandoned")
        except Exception as e:  # noqa: BLE001
            st.fail(f"abandoner {i}: {type(e).__name__}: {e}")
        time.sleep(max(0.0, min(gap * rng.uniform(0.5, 1.5), deadline - time.time())))


def slowloris(port, n, stop, st):
    """n sockets sending a request's headers a byte a second; a socket the server closes is
    opened again."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 4096
    socks = [None] * n
    sent = [0] * n
    while not stop.is_set():
        for j in range(n):
            try:
                if socks[j] is None:
                    socks[j] = socket.create_connection(("127.0.0.1", port), timeout=2)
                    sent[j] = 0
                    st.count("slowloris_connects")
                socks[j].sendall(head[sent[j] % len(head):][:1])
                sent[j] += 1
            except OSError:
                if socks[j] is not None:
                    socks[j].close()
                socks[j] = None
        stop.wait(1.0)
    for s in socks:
        if s is not None:
            s.close()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def watch(a, server, port, stop, st, samples):
    """The server's RSS every half second, and /health every second (within --health-s)."""
    last = 0.0
    while not stop.is_set():
        samples.append((time.time(), rss_mb(server.pid)))
        if time.time() - last >= 1.0:
            last = time.time()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=a.health_s)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status != 200:
                    raise ValueError(f"status {r.status}")
                with st.lock:
                    st.health.append(time.time() - last)
            except Exception as e:  # noqa: BLE001
                st.fail(f"/health: {type(e).__name__}: {e}")
        stop.wait(0.5)


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
    ap.add_argument("--slowloris", type=int, default=0, help="sockets trickling headers")
    ap.add_argument("--abandon", type=int, default=0, help="streams whose client hangs up")
    ap.add_argument("--health-s", type=float, default=2.0, help="/health must answer within this")
    ap.add_argument("--rss-growth-mb", type=float, default=None,
                    help="most the RSS may grow from the first quarter of the run to its end "
                         "(default: reported, not checked)")
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
        idle_rss = rss_mb(server.pid)
        samples = []
        stop = threading.Event()
        side = [threading.Thread(target=watch, args=(a, server, port, stop, st, samples))]
        if a.slowloris:
            side.append(threading.Thread(target=slowloris, args=(port, a.slowloris, stop, st)))
        for t in side:
            t.start()
        t0 = time.time()
        deadline = t0 + a.seconds
        threads = [threading.Thread(target=client, args=(i, a, port, docs, st, deadline))
                   for i in range(a.clients)]
        if a.abandon:
            threads += [threading.Thread(target=abandoner, args=(i, a, port, st, deadline))
                        for i in range(ABANDONERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline + a.drain - time.time()))
        lost = sum(t.is_alive() for t in threads)
        wall = time.time() - t0
        stop.set()
        for t in side:
            t.join()
        end_rss = rss_mb(server.pid)
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
    quarter = [r for t, r in samples if t <= t0 + a.seconds / 4] or [idle_rss]
    peak = max([r for _, r in samples] + [idle_rss])
    grew = end_rss - quarter[-1]
    print(f"server RSS: idle {idle_rss:.1f} MB, after the first quarter {quarter[-1]:.1f} MB, "
          f"peak {peak:.1f} MB, end {end_rss:.1f} MB (grew {grew:+.1f} MB since the quarter)")
    if st.health:
        print(f"/health during the run (n={len(st.health)}): p50 {pct(st.health, 50):.3f} s, "
              f"max {max(st.health):.3f} s")
    if a.rss_growth_mb is not None and grew > a.rss_growth_mb:
        st.fail(f"RSS grew {grew:.1f} MB after the first quarter (bound {a.rss_growth_mb} MB)")
    for f in st.failures[:20]:
        print("FAIL", f)
    ok = not st.failures and lost == 0 and n > 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
