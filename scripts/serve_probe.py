#!/usr/bin/env python3
# Issue 59's probe cases against a running `spattn serve` on 127.0.0.1:PORT, one line each:
# framing (7), a plan path (9), foreign Host/Origin/text/plain (11), GET on a POST route, a
# gzip bomb (1), a chunked body (2), a 4 MiB /tokenize with pieces (3), plan=/dev/zero (4),
# /health during a slowloris (6). Usage: serve_probe.py PORT [PID]: with the server's PID, its
# resident memory idle and its peak (VmHWM, which only grows) after each memory case.
import socket, sys, time, json, zlib, threading, resource
port=int(sys.argv[1])
pid=int(sys.argv[2]) if len(sys.argv) > 2 else None
def mem(field):
    if pid is None: return ""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"): return "%.1f MB" % (int(line.split()[1]) / 1024)
def peak(): return f"  [server peak RSS so far {mem('VmHWM')}]" if pid else ""
if pid: print("idle server: RSS", mem("VmRSS"), " peak", mem("VmHWM"))
def raw(data, wait=3):
    s=socket.create_connection(("127.0.0.1",port)); s.sendall(data); s.settimeout(wait)
    out=b""; t=time.time(); first=None
    try:
        while True:
            b=s.recv(65536)
            if not b: break
            if first is None: first=time.time()-t
            out+=b
            if b"\r\n\r\n" in out and b"Content-Length: %d"%len(out.split(b"\r\n\r\n",1)[1]) in out: break
    except Exception: pass
    # The time to the reply's first byte (a kept-alive connection is not waited out).
    s.close(); return out.split(b"\r\n")[0].decode() or "(no reply)", round(first if first is not None else time.time()-t,2), out
h=b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
for extra in [b"", b"Content-Length: -5\r\n", b"Content-Length: 1e20\r\n"]:
    st,t,_=raw(h+extra+b"\r\n"); print("7 framing", repr(extra), st, t)
b=json.dumps({"prompt":"x","max_tokens":2,"spattn":{"attn":"mminference:plan=/etc/passwd"}}).encode()
st,t,o=raw(h+b"Content-Length: %d\r\n\r\n"%len(b)+b); print("9 plan=/etc/passwd", st, o[o.find(b'"message"'):][:110])
st,t,o=raw(b"POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 31\r\n\r\n{\"prompt\":\"x\",\"max_tokens\":1}  "); print("11 foreign host/origin text/plain", st)
st,t,o=raw(b"GET /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); print("minor GET on POST route", st)
# 1. gzip bomb: 64 MiB of spaces
bomb=zlib.compressobj(9, zlib.DEFLATED, 31); g=bomb.compress(b'{"prompt": "'+b" "*(64<<20))+bomb.flush()
st,t,o=raw(h+b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"%len(g)+g, 30); print("1 gzip bomb (%d bytes)"%len(g), st, t, "s" + peak())
# 2. chunked: offer 64 MiB, count what the server takes
s=socket.create_connection(("127.0.0.1",port)); s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
chunk=b"a"*65536; sent=0; s.settimeout(5)
try:
    while sent < (64<<20):
        s.sendall(b"10000\r\n"+chunk+b"\r\n"); sent+=len(chunk)
except Exception as e: pass
s.close()
print("2 chunked /tokenize: server took", sent>>20, "MiB of 64 offered before refusing" if sent < (64<<20) else "(all of it)", peak())
# 3. /tokenize with pieces over 4 MiB of text
b=json.dumps({"content":"a"*(4<<20),"with_pieces":True}).encode()
st,t,o=raw(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"%len(b)+b, 30); print("3 /tokenize 4 MiB with_pieces", st, t, "s" + peak())
# 4. a plan naming /dev/zero
b=json.dumps({"prompt":"x","max_tokens":2,"spattn":{"attn":"mminference:plan=/dev/zero"}}).encode()
st,t,o=raw(h+b"Content-Length: %d\r\n\r\n"%len(b)+b); print("4 plan=/dev/zero", st, t, "s" + peak())
# 6. slowloris: 14 sockets, a byte each per 100 ms; /health meanwhile
socks=[socket.create_connection(("127.0.0.1",port)) for _ in range(14)]
stop=False
def drip():
    req=b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    for i in range(40):
        if stop: break
        for x in socks:
            try: x.send(req[i:i+1])
            except Exception: pass
        time.sleep(0.1)
th=threading.Thread(target=drip); th.start(); time.sleep(0.3)
st,t,o=raw(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 3); print("6 /health during slowloris", st, t, "s")
stop=True; th.join()
for x in socks: x.close()
