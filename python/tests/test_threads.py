"""Calls from several Python threads at once keep their own settings: spattn.bench runs with
the GIL released, and the bf16 operand path it chooses or is given is its own (reported in
its record), never a switch of the process that other threads' calls would see."""
import threading

import numpy as np

import spattn
from spattn import _core

# The deterministic part of a bench record: the path it took and what each method computed,
# as the metrics judge the output's bits (timings and peaks left out).
KEYS = ("method", "sparsity", "score_entries", "recall", "recall_min", "rel_l2", "path",
        "extras", "per_head")


def outcome(record):
    return (record["bf16_path"]["chosen"],
            [tuple(str(r[k]) for k in KEYS) for r in record["results"]])


def bench(path):
    return outcome(spattn.bench(methods="blasst:lambda=1e-3", seq=512, heads=2, dim=64,
                                dtype="bfloat16", seed=4, repeat=1, threads=1,
                                bf16_path=path))


def test_benches_on_two_bf16_paths_and_an_attention_call_keep_their_own_bits():
    # bf16 arrays as the extension takes them (int16 views tagged "bf16"): numpy has no
    # bfloat16 and torch may be absent; spattn.attention passes torch's bfloat16 the same way.
    w = _core.workload("text", 512, 2, 0, 64, "bfloat16", 7, 0)
    assert w["dtype"] == "bf16"

    def attention():
        out, _, _ = _core.attention(w["q"], w["k"], w["v"], "bf16", "dense", True, None, "bhsd",
                                    False, False, 1, None)
        return out.tobytes()

    # Without AVX512_BF16 (a Zen 3, say) "dot" is refused by name; "auto" then widens, so the
    # two concurrent benches still take the two ways a path is chosen.
    try:
        first, first_alone = "dot", bench("dot")
    except ValueError as e:
        assert "AVX512_BF16" in str(e)
        first, first_alone = "auto", bench("auto")
    alone = {first: first_alone, "widen": bench("widen"), "attention": attention()}
    assert alone["widen"][0] == "widen"
    if first == "dot":
        assert alone["dot"][0] == "dot"
        assert alone["dot"][1] != alone["widen"][1]  # the paths compute different bits
    else:
        assert alone["auto"] == alone["widen"]  # both widen

    got = {}
    differ = []
    benches_done = threading.Event()

    def run_bench(path):
        got[path] = bench(path)

    def run_attention():
        while True:  # throughout both benches
            if attention() != alone["attention"]:
                differ.append(1)
            if benches_done.is_set():
                return

    threads = [threading.Thread(target=run_bench, args=(p,)) for p in (first, "widen")]
    watcher = threading.Thread(target=run_attention)
    for t in threads + [watcher]:
        t.start()
    for t in threads:
        t.join()
    benches_done.set()
    watcher.join()
    assert got[first] == alone[first]
    assert got["widen"] == alone["widen"]
    assert not differ
    assert attention() == alone["attention"]  # and nothing was left changed
