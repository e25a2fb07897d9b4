#!/usr/bin/env python3
"""Bias or variance? Where a BLASST calibration's misses on `text` come from (issue 24).

Measures, for the issue's calibration (`spattn calibrate --workload text --heads 8 --samples 4
--seed 0 --lengths 4096,8192,16384,32768`), each sample's exact sparsity over a fine lambda
grid (one dense margin pass per sample: the package's evaluate_calibration with a law whose
lambda_for(t, L) sweeps lambda = 1e-9^(1 - t) over the grid of t), for the calibration seeds
0-3 at every length and for many fresh seeds (1000, 1001, ...) at 4K and 8K. From those curves
it fits the law in each form on the calibration seeds (as `spattn calibrate` does: the lambda
that reaches s = 0.20, 0.21, ..., 0.80 on each length's pooled samples, least squares in
ln lambda) and prints, per form, length and target, the miss on the calibration seeds, on the
mean of all fresh seeds (the law's bias) and on seeds 1000-1003 (the issue's evaluation), and
the spread of 4-seed means at one lambda (the evaluation's own variance).

  PYTHONPATH=build/python /usr/bin/python3 scripts/calibration_spread.py [--fresh-4k 48]
      [--fresh-8k 16] [--save curves.npz]

Sparsity between grid points is interpolated (400 points over 9 decades), so figures agree
with `spattn calibrate --evaluate` to about 0.1 point. About 20 minutes on 2 cores."""
import argparse
import math

import numpy as np

import spattn
from calibration_draws import columns  # the terms of the CLI's fit, written once

LENGTHS = [4096, 8192, 16384, 32768]
TARGETS = [0.3, 0.5, 0.7]
FIT = np.round(np.arange(0.20, 0.8001, 0.01), 2)
FORMS = {"linear (before)": "gd", "curvature (after)": "gdqQ"}


def curves(law, grid, seed, length, samples):
    e = spattn.evaluate_calibration(law, lengths=[length], heads=8, seed=seed, samples=samples,
                                    targets=list(grid))
    return np.array(e["sparsity"][0]).T  # [sample, lambda]


def ln_lambda_at(curve, lnl, s):
    j = int(np.searchsorted(curve, s))
    if j == 0 or j >= len(curve):
        return np.nan
    t = (s - curve[j - 1]) / max(curve[j] - curve[j - 1], 1e-12)
    return lnl[j - 1] + t * (lnl[j] - lnl[j - 1])


def fit(train, lnl, form):
    rows, y = [], []
    for n, c in train.items():
        pooled = c.mean(0)
        for s in FIT:
            v = ln_lambda_at(pooled, lnl, s)
            if np.isfinite(v):
                rows.append(columns(n, s, form))
                y.append(v)
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)
    return lambda s, n: float(np.dot(columns(n, s, form), coef))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fresh-4k", type=int, default=48)
    p.add_argument("--fresh-8k", type=int, default=16)
    p.add_argument("--save")
    a = p.parse_args()
    law = spattn.calibrate("text", LENGTHS, heads=8, samples=4, seed=0, order="local_first")
    grid = np.linspace(0.0, 0.999, 400)
    law.update(alpha=1e-9, beta=math.log(1e9), gamma=0.0, delta=0.0, eta=0.0, epsilon=0.0)
    lnl = math.log(1e-9) + math.log(1e9) * grid
    train = {n: curves(law, grid, 0, n, 4) for n in LENGTHS}
    fresh = {4096: curves(law, grid, 1000, 4096, a.fresh_4k),
             8192: curves(law, grid, 1000, 8192, a.fresh_8k)}
    if a.save:
        np.savez(a.save, ln_lambda=lnl, **{f"train_{n}": c for n, c in train.items()},
                 **{f"fresh_{n}": c for n, c in fresh.items()})
    at = lambda c, ln: float(np.interp(ln, lnl, c))
    for name, form in FORMS.items():
        f = fit(train, lnl, form)
        print(f"{name}: miss in points: calibration seeds 0-3 | mean of fresh seeds | seeds 1000-1003")
        for n in LENGTHS:
            cells = []
            for t in TARGETS:
                ln = f(t, n)
                cell = f"{100 * (at(train[n].mean(0), ln) - t):+5.2f}"
                if n in fresh:
                    cell += (f" {100 * (at(fresh[n].mean(0), ln) - t):+5.2f}"
                             f" {100 * (at(fresh[n][:4].mean(0), ln) - t):+5.2f}")
                cells.append(f"{int(100 * t)}%: {cell}")
            print(f"  {n:6d}  " + "   ".join(cells))
        for n, c in fresh.items():
            x = np.array([at(c[i], f(0.5, n)) for i in range(len(c))])
            m4 = x[: len(x) // 4 * 4].reshape(-1, 4).mean(1)
            print(f"  {n}: at the 50% threshold, per-sample sd {100 * x.std(ddof=1):.2f} points "
                  f"({len(x)} seeds); disjoint 4-seed means from {100 * (m4.min() - 0.5):+.2f} to "
                  f"{100 * (m4.max() - 0.5):+.2f} (sd {100 * m4.std(ddof=1):.2f})")


if __name__ == "__main__":
    main()
