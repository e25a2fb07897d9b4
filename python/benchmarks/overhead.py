"""The Python call's overhead over the C++ call.

spattn.attention(q, k, v) against the library called from C++ on the very same arrays
(spattn._core.cpp_call_seconds: make the method, allocate the output in q's layout, run it,
with no Python in between), timed round-robin so that drift in the machine's speed falls on
both alike. Reported: the median time of each and the median of the per-round ratios, for
numpy inputs (and torch tensors when torch is installed), plus the fixed cost per call in
microseconds, measured on a tiny problem where it is not hidden by the kernels, and that cost
over the C++ time: at full size the paired ratio also holds the machine's noise (a few
percent between two runs of the same call), the fixed cost does not.

    PYTHONPATH=build/python /usr/bin/python3 python/benchmarks/overhead.py [--seq 4096 --dim 128]
"""
import argparse
import statistics
import sys
import time

import spattn
from spattn import _core
from spattn._arrays import unwrap_qkv


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def measure(q, k, v, method, threads, repeat):
    qa, ka, va, tag, _ = unwrap_qkv(q, k, v)

    def py_call():
        t0 = time.perf_counter()
        spattn.attention(q, k, v, method=method, threads=threads)
        return time.perf_counter() - t0

    def cpp_call():
        return _core.cpp_call_seconds(qa, ka, va, tag, method, True, "bshd", threads)

    py_call(), cpp_call()  # warm-up: page in the buffers and the code
    py, cpp = [], []
    for i in range(repeat):
        # Alternate which side goes first, so neither always follows the other.
        if i % 2:
            cpp.append(cpp_call())
            py.append(py_call())
        else:
            py.append(py_call())
            cpp.append(cpp_call())
    ratios = [p / c for p, c in zip(py, cpp)]
    return statistics.median(py), statistics.median(cpp), statistics.median(ratios)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--methods", default="dense;blasst:lambda=1e-3",
                    help="method specs separated by ';'")
    ap.add_argument("--repeat", type=int, default=31)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    print(f"cpu: {cpu_name()}, SIMD {spattn.simd_target()}, python {sys.version.split()[0]}")
    print(f"problem: text workload, q [{a.seq}, {a.heads}, {a.dim}] kv [{a.seq}, {a.kv_heads}, "
          f"{a.dim}] float32 in layout bshd (strided views), causal, threads {a.threads or 'all'}, "
          f"median of {a.repeat} rounds, Python and C++ calls alternating")
    w = spattn.workload("text", seq=a.seq, heads=a.heads, kv_heads=a.kv_heads, dim=a.dim)
    inputs = [("numpy", tuple(w))]
    try:
        import torch
        inputs.append(("torch", tuple(torch.from_numpy(x) for x in w)))
    except ImportError:
        print("(torch not installed: numpy inputs only)")
    tiny = spattn.workload("text", seq=64, heads=1, dim=a.dim)
    print(f"\n{'method':<22} {'input':<6} {'python ms':>10} {'C++ ms':>10} {'overhead':>9} "
          f"{'fixed us/call':>14} {'fixed/C++':>10}")
    for method in a.methods.split(";"):
        for name, (q, k, v) in inputs:
            py, cpp, ratio = measure(q, k, v, method, a.threads, a.repeat)
            cast = (lambda x: torch.from_numpy(x)) if name == "torch" else (lambda x: x)
            tpy, tcpp, _ = measure(*(cast(x) for x in tiny), method, a.threads, 201)
            print(f"{method:<22} {name:<6} {1e3 * py:>10.2f} {1e3 * cpp:>10.2f} "
                  f"{100 * (ratio - 1):>8.2f}% {1e6 * (tpy - tcpp):>14.1f} "
                  f"{100 * (tpy - tcpp) / cpp:>9.4f}%")


if __name__ == "__main__":
    main()
