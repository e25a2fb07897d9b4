"""What the `spattn serve` scripts share (serve_load.py, serve_prefix_reuse.py): starting the
server on a free loopback port and stopping it, a JSON POST, and reading a server-sent-event
stream event by event. Python's standard library only."""
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time


def start_server(spattn, model, extra_args, wait=120):
    """`spattn serve -m MODEL --host 127.0.0.1 --port 0 EXTRA...`: the process and the port it
    says it listens on (its stderr is drained afterwards so it never blocks on a full pipe)."""
    cmd = [spattn, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"] + list(extra_args)
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + wait
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    sys.exit("the server did not start: " + " ".join(cmd))


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def post_json(port, path, body, timeout=1800):
    """POSTs a JSON body; (status, raw response bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def sse_events(response):
    """The events of a server-sent-event response as they arrive: (time received, the event's
    text without its blank-line end), comments (": keep-alive") included."""
    buf = b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            yield time.time(), ev.decode()
