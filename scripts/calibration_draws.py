#!/usr/bin/env python3
"""How much of a BLASST calibration's miss on `text` is the draw of its seeds (issue 24)?

The issue's check calibrates on seeds 0-3 (`spattn calibrate --workload text --heads 8
--samples 4 --seed 0 --lengths 4096,8192,16384,32768`) and reads the worst miss of 4-seed
means on seeds 1000-1003 at 4K, 16K and 32K for 30%, 50% and 70%. Both sets of four are draws.
This script measures each sample's exact sparsity over a fine lambda grid (as
calibration_spread.py does) for a pool of fresh seeds at every length, then:

  1. for the law in LAW (a file `spattn calibrate --out` wrote): per length and target, the
     miss on seeds 1000-1003, on the mean of the pool (the law's bias, with its standard
     error) and the sd of a 4-seed mean at that threshold;
  2. the form's own bias: the law fitted on the mean of every seed at each length, its miss
     on that mean;
  3. the procedure itself, redrawn: calibration on k seeds, evaluation on k others (the same
     seeds at every length, as the command uses them), many times, for k = 4 (the command),
     6, 8, 10; the distribution of the worst mean miss, and the same for a perfect law (each
     length's threshold where the mean of every seed hits the target: only the evaluation's
     draw left; a little optimistic, as the evaluation seeds are among them).

  /usr/bin/python3 scripts/calibration_draws.py calib.json [--spattn build/bin/spattn]
      [--pool 16] [--fresh-4k 48] [--cache curves.npz]

Each sample's curve comes from `spattn calibrate --evaluate` with --samples 1 and a law whose
thresholds sweep the grid, so the figures are the CLI's (printed to 0.1 point per sample).
About 40 minutes on 2 busy cores for a pool of 16 (most of it the 32K samples)."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

FIT = np.round(np.arange(0.20, 0.8001, 0.01), 2)  # the CLI's fit points (CalibrationOptions)

LENGTHS = [4096, 8192, 16384, 32768]
EVAL = [4096, 16384, 32768]
TARGETS = [0.3, 0.5, 0.7]
GRID = np.round(np.linspace(0.0, 0.998, 500), 6)
LN_LAMBDA = math.log(1e-9) * (1.0 - GRID)  # lambda = 1e-9 .. ~1, steps of 0.04 in ln
CELL = re.compile(r"([0-9.]+)% \(")       # a target column: "52.2% ( +2.2) [...]"


def sweep_law(path, out):
    # A law whose lambda_for(t, L) is 1e-9^(1 - t) at every L: evaluating it at the targets GRID
    # reads a sample's sparsity at every lambda of the grid from one dense pass.
    law = json.load(open(path))
    law.update(alpha=1e-9, beta=math.log(1e9), gamma=0.0, delta=0.0, eta=0.0, epsilon=0.0)
    json.dump(law, open(out, "w"))


def curves(spattn, sweep, seed, length, samples):
    rows = []
    for i in range(samples):
        r = subprocess.run([spattn, "calibrate", "--evaluate", sweep, "--heads", "8", "--samples",
                            "1", "--seed", str(seed + i), "--lengths", str(length), "--targets",
                            ",".join(f"{t:g}" for t in GRID)],
                           check=True, capture_output=True, text=True).stdout
        line = next(l for l in r.splitlines() if l.split() and l.split()[0] == str(length))
        rows.append([float(x) / 100 for x in CELL.findall(line)])
        assert len(rows[-1]) == len(GRID), line[:200]
        print(f"  curve: length {length}, seed {seed + i}", file=sys.stderr, flush=True)
    return np.array(rows)  # [sample, grid]


def columns(n, s, form):  # the terms of ln(lambda) in the CLI's fit (blasst_calibration.cpp)
    x = math.log(n)
    c = [1.0, s]
    if "g" in form: c.append(-x)
    if "d" in form: c.append(-s * x)
    if "q" in form: c.append(s * s)
    if "Q" in form: c.append(-s * s * x)
    return c


def at(curve, ln):  # sparsity of one (or a mean) curve at ln(lambda)
    return float(np.interp(ln, LN_LAMBDA, curve))


def ln_at(curve, s):  # ln(lambda) where a (monotone) curve reaches s; NaN beyond it
    if not curve[0] < s < curve[-1]:
        return math.nan
    return float(np.interp(s, np.maximum.accumulate(curve), LN_LAMBDA))


def fit(pooled, form="gdqQ"):
    rows, y = [], []
    for n, c in pooled.items():
        for s in FIT:
            v = ln_at(c, s)
            if np.isfinite(v):
                rows.append(columns(n, s, form))
                y.append(v)
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)
    return lambda s, n: float(np.dot(columns(n, s, form), coef))


def file_law(path):
    c = json.load(open(path))
    return lambda s, n: (math.log(c["alpha"]) + c["beta"] * s + c["eta"] * s * s
                         - (c["gamma"] + c["delta"] * s + c["epsilon"] * s * s) * math.log(n))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("law")
    p.add_argument("--spattn", default="build/bin/spattn")
    p.add_argument("--pool", type=int, default=16, help="fresh seeds 1000.. at every length")
    p.add_argument("--fresh-4k", type=int, default=48, help="fresh seeds at 4K (>= pool)")
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--cache")
    a = p.parse_args()
    if a.cache and os.path.exists(a.cache):
        z = np.load(a.cache)
        cal = {n: z[f"cal_{n}"] for n in LENGTHS}
        pool = {n: z[f"pool_{n}"] for n in LENGTHS}
    else:
        sweep = os.path.join(tempfile.mkdtemp(), "sweep.json")
        sweep_law(a.law, sweep)
        cal = {n: curves(a.spattn, sweep, 0, n, 4) for n in LENGTHS}
        pool = {n: curves(a.spattn, sweep, 1000, n, a.fresh_4k if n == 4096 else a.pool)
                for n in LENGTHS}
        if a.cache:
            np.savez(a.cache, **{f"cal_{n}": c for n, c in cal.items()},
                     **{f"pool_{n}": c for n, c in pool.items()})

    law = file_law(a.law)
    print(f"1. the law in {a.law}: miss in points (mean minus target)")
    print("  length target  seeds 1000-1003   calib seeds 0-3   pool mean +- se (n)   "
          "sample sd   4-seed-mean sd")
    for n in EVAL:
        for t in TARGETS:
            x = np.array([at(c, law(t, n)) for c in pool[n]])
            print(f"  {n:6d}  {int(100 * t):3d}%   {100 * (x[:4].mean() - t):+8.2f}"
                  f"          {100 * (at(cal[n].mean(0), law(t, n)) - t):+8.2f}"
                  f"        {100 * (x.mean() - t):+6.2f} +- {100 * x.std(ddof=1) / math.sqrt(len(x)):.2f}"
                  f" ({len(x)})   {100 * x.std(ddof=1):6.2f}      {100 * x.std(ddof=1) / 2:6.2f}")

    # 2. The form's own bias: the law fitted on the means of every seed (calibration seeds and
    # pool, the same seeds at every length), its miss on those means.
    every = {n: np.concatenate([cal[n], pool[n][:a.pool]]) for n in LENGTHS}
    print(f"\n2. the form: the law fitted on the mean of {len(every[4096])} seeds per length "
          "(0-3 and the pool), its miss on that mean, points (se of such a mean: "
          + ", ".join(f"{n // 1024}K {100 * every[n].std(0, ddof=1).max() / math.sqrt(len(every[n])):.1f}"
                      for n in EVAL) + " at most)")
    for name, form in [("curvature law", "gdqQ"), ("linear law", "gd")]:
        f = fit({n: every[n].mean(0) for n in LENGTHS}, form)
        print(f"  {name:14s}" + "  ".join(
            f"{n // 1024}K " + "/".join(f"{100 * (at(every[n].mean(0), f(t, n)) - t):+.1f}" for t in TARGETS)
            for n in LENGTHS))

    # 3. The procedure redrawn: calibrate on k seeds, evaluate on k others, the same seeds at
    # every length as the command uses them; beside it a perfect law (at each length the
    # threshold where the mean of every seed reaches the target), which leaves only the
    # evaluation's draw.
    rng = np.random.default_rng(0)
    seeds = len(every[4096])
    perfect = {(n, t): ln_at(every[n].mean(0), t) for n in EVAL for t in TARGETS}
    worst = lambda ln, idx: 100 * max(abs(at(every[n][idx].mean(0), ln(t, n)) - t)
                                      for n in EVAL for t in TARGETS)
    print(f"\n3. the procedure redrawn {a.draws} times from {seeds} seeds: worst mean miss over "
          "4K/16K/32K x 30/50/70%, points")
    print("  seeds (calibrate / evaluate)   law: median  p90  P(<=1.2)  P(<=2)   "
          "perfect law: median  P(<=1.2)  P(<=2)")
    for k in (4, 6, 8, 10):
        w, w0 = [], []
        for _ in range(a.draws):
            pick = rng.permutation(seeds)
            ci, ei = pick[:k], pick[k:2 * k]
            w.append(worst(fit({n: every[n][ci].mean(0) for n in LENGTHS}), ei))
            w0.append(worst(lambda t, n: perfect[(n, t)], ei))
        w, w0 = np.array(w), np.array(w0)
        print(f"  {k:2d} / {k:2d}                            {np.median(w):5.2f} {np.percentile(w, 90):5.2f}"
              f"    {np.mean(w <= 1.2):.2f}    {np.mean(w <= 2):.2f}                 "
              f"{np.median(w0):5.2f}     {np.mean(w0 <= 1.2):.2f}    {np.mean(w0 <= 2):.2f}")


if __name__ == "__main__":
    main()
