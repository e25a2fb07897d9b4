"""BLASST threshold calibration (the BLASST paper, Algorithm 2, with spattn's length-slope
and curvature form): the fit `spattn calibrate` writes, as a dict."""
import json
import os

from . import _core
from ._arrays import normalize_dtype, unwrap_qkv

_LENGTHS = (4096, 8192, 16384, 32768)


def calibrate(workload="text", lengths=_LENGTHS, heads=8, kv_heads=None, dim=128,
              dtype="float32", seed=0, samples=2, *, qkv=None, layout="bshd",
              file_layout="hsd", fit_min=0.2, fit_max=0.8, gamma=None, length_slope=True,
              curvature=True, order="local_first", causal=True, threads=None, out=None):
    """Fits lambda * L^(gamma + delta * s + epsilon * s^2) = alpha * exp(beta * s + eta * s^2)
    on generated workloads (`samples` per length, seeds seed, seed + 1, ...), or on `qkv`: a
    list of (q, k, v) tuples in `layout` or of paths load_qkv reads. gamma: fix the length
    exponent (1: the paper's form) instead of fitting it; curvature=False keeps eta = epsilon
    = 0. Writes the JSON to `out` when given; returns it as a dict (use it as
    blasst:sparsity=S,calib=FILE)."""
    if qkv is None:
        text = _core.calibrate_workloads(workload, list(lengths), heads, kv_heads or 0, dim,
                                         normalize_dtype(dtype), seed, samples, fit_min, fit_max,
                                         gamma, length_slope, curvature, order, causal,
                                         threads or 0)
    else:
        from ._tools import load_qkv
        items = [qkv] if isinstance(qkv, (str, os.PathLike)) else list(qkv)
        names = ", ".join(str(x) for x in items if isinstance(x, (str, os.PathLike)))
        cal = _core.Calibrator(fit_min, fit_max, gamma, length_slope, curvature, order, causal,
                               threads or 0, names or "arrays")
        for item in items:
            if isinstance(item, (str, os.PathLike)):
                q, k, v = load_qkv(item, file_layout=file_layout, layout="bhsd")
                qa, ka, va, tag, _ = unwrap_qkv(q, k, v)
                cal.add(qa, ka, va, tag, "bhsd")
            else:
                qa, ka, va, tag, _ = unwrap_qkv(*item)
                cal.add(qa, ka, va, tag, layout)
        text = cal.fit()
    if out is not None:
        _core.save_calibration(str(out), text)
    return json.loads(text)


def load_calibration(path):
    """A calibration file, checked field by field, as a dict."""
    return json.loads(_core.load_calibration(str(path)))


def lambda_for(calibration, sparsity, length):
    """The threshold the fit gives for a target sparsity at a context length."""
    return _core.lambda_for(_as_json(calibration), sparsity, length)


def evaluate_calibration(calibration, workload="text", lengths=_LENGTHS, heads=8, kv_heads=None,
                         dim=128, dtype="float32", seed=100, samples=2, *, targets=(0.5, 0.7),
                         fixed_lambda=0.0, causal=True, threads=None):
    """The sparsity a calibration's thresholds reach on fresh workloads (`spattn calibrate
    --evaluate`): per length and target the sparsity of each sample, beside a fixed lambda
    (0: the calibration's for the last target at the first length). calibration: a dict from
    calibrate() or a file. Returns {"lengths", "targets", "fixed_lambda", "sparsity"
    [length][target][sample], "fixed" [length][sample], "mean" [length][target], ...}."""
    origin = str(calibration) if isinstance(calibration, (str, os.PathLike)) else "calibration"
    r = _core.evaluate_calibration(_as_json(calibration), origin, workload, list(lengths), heads,
                                   kv_heads or 0, dim, normalize_dtype(dtype), seed, samples,
                                   list(targets), fixed_lambda, causal, threads or 0)
    r["mean"] = [[sum(s) / len(s) for s in per_target] for per_target in r["sparsity"]]
    r["fixed_mean"] = [sum(s) / len(s) for s in r["fixed"]]
    return r


def _as_json(calibration):
    if isinstance(calibration, (str, os.PathLike)):
        return _core.load_calibration(str(calibration))
    if isinstance(calibration, dict):
        return json.dumps(calibration)
    raise TypeError(f"calibration: expected a dict from calibrate() or a file path, got "
                    f"{type(calibration).__name__}")
