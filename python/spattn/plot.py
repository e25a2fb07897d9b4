"""Figures with matplotlib. Each function returns the Figure; saving it is the caller's choice
(fig.savefig("x.png")). Importing this module imports matplotlib."""
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from . import _core
from ._arrays import unwrap_qkv

# Kept blocks bright, skipped causal blocks dark, blocks no row may see grey (as `spattn mask`).
_MASK_COLORS = ListedColormap(["#1b1b2f", "#f2c14e", "#8c8c8c"])


def _mask_image(mask, causal_blocks):
    img = np.where(mask, 1, 0)
    for qb, n in enumerate(causal_blocks):
        img[qb, n:] = 2
    return img


def mask(q, k, v, method, *, head=0, topk=None, causal=True, layout="bshd", threads=None,
         figsize=(15, 5)):
    """One head's block mask beside the oracle top-k mask (as many blocks per query block as
    the method kept, or `topk`) and the exact block mass as a log10 heat map, like `spattn
    mask`. Query block 0 at the top."""
    qa, ka, va, tag, _ = unwrap_qkv(q, k, v)
    p = _core.mask_panels(qa, ka, va, tag, method, head, topk or 0, causal, layout, threads or 0)
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, 3)
    cb = p["causal_blocks"]
    oracle_rule = f"top {topk} blocks per row" if topk else "same blocks per row"
    panels = [
        (p["method_mask"], f"method {method}\n{100 * p['method_density']:.1f}% of causal blocks, "
                           f"mass {p['method_mass']:.4f}"),
        (p["oracle_mask"], f"oracle top-k ({oracle_rule})\n{100 * p['oracle_density']:.1f}% of "
                           f"causal blocks, mass {p['oracle_mass']:.4f}"),
    ]
    for ax, (m, title) in zip(axes, panels):
        ax.imshow(_mask_image(m, cb), cmap=_MASK_COLORS, vmin=0, vmax=2, interpolation="nearest",
                  aspect="auto")
        ax.set_title(title, fontsize=9)
    mass = p["mass"].astype(np.float64)
    visible = np.arange(mass.shape[1])[None, :] < np.asarray(cb)[:, None]
    floor = max(mass[visible & (mass > 0)].min(initial=1.0), 1e-12)
    log_mass = np.where(visible, np.log10(np.maximum(mass, floor)), np.nan)
    im = axes[2].imshow(log_mass, cmap="magma", interpolation="nearest", aspect="auto")
    axes[2].set_title("block mass (log10, mean over each query block's rows)", fontsize=9)
    fig.colorbar(im, ax=axes[2])
    for ax in axes:
        ax.set_xlabel(f"key block ({p['block_k']} keys)")
        ax.set_ylabel(f"query block ({p['block_q']} rows)")
    fig.suptitle(f"head {head} of {p['heads']}, q_len {p['q_len']}, kv_len {p['kv_len']}"
                 f"{', causal' if causal else ''}; sparsity (all heads) "
                 f"{100 * p['sparsity']:.1f}%")
    return fig


def sparsity_vs_length(calibration, *, lambdas=5, figsize=(7, 5)):
    """Sparsity against context length.

    calibration: a dict from spattn.calibrate() (its recorded curve: one line per threshold
    lambda, `lambdas` of them spread over those that reach 5-95% somewhere), or from
    spattn.evaluate_calibration() (one line per target sparsity, the mean over the workloads
    with their range, beside the fixed lambda: the drift calibration removes)."""
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    if "targets" in calibration:
        e = calibration
        lengths = e["lengths"]
        for ti, target in enumerate(e["targets"]):
            s = np.array([per[ti] for per in e["sparsity"]])
            mean = s.mean(axis=1)
            err = [mean - s.min(axis=1), s.max(axis=1) - mean]
            ax.errorbar(lengths, mean, yerr=err, marker="o", capsize=3,
                        label=f"calibrated, target {100 * target:.0f}%")
            ax.axhline(target, color="grey", lw=0.8, ls=":")
        f = np.array(e["fixed"])
        ax.plot(lengths, f.mean(axis=1), marker="s", ls="--", color="black",
                label=f"fixed lambda {e['fixed_lambda']:.3g}")
        ax.set_title("sparsity reached on fresh workloads")
    else:
        curve = calibration["curve"]
        grid = sorted({p["lambda"] for p in curve})
        useful = [lam for lam in grid
                  if any(0.05 < p["sparsity"] < 0.95 for p in curve if p["lambda"] == lam)]
        picks = [useful[int(i)] for i in np.linspace(0, len(useful) - 1, min(lambdas, len(useful)))]
        for lam in dict.fromkeys(picks):
            pts = sorted((p["length"], p["sparsity"]) for p in curve if p["lambda"] == lam)
            ax.plot(*zip(*pts), marker="o", label=f"lambda {lam:.2g}")
        ax.set_title(f"BLASST sparsity at fixed thresholds ({calibration['source']})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length")
    ax.set_ylabel("sparsity (share of causal entries skipped)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# Missed mass below this is drawn at it (dense misses none).
_MISSED_FLOOR = 1e-6


def _label_offsets(points, labels, ax):
    """Vertical offsets (in points) that keep labels off each other and off the markers: a
    label moves down in steps while its box would overlap a marker or a label placed before."""
    scale = 72 / ax.figure.dpi  # display pixels to points
    at = [tuple(c * scale for c in ax.transData.transform(p)) for p in points]
    placed = [(px - 5, px + 5, py) for px, py in at]  # markers, which labels must not cover
    offsets = []
    for (px, py), text in zip(at, labels):
        x0, x1 = px + 6, px + 6 + 4.6 * len(text)  # 8-point text: about 4.6 points a character
        dy = 0
        while any(x0 < q1 and q0 < x1 and abs(py + dy - qy) < 10 for q0, q1, qy in placed):
            dy -= 10
        placed.append((x0, x1, py + dy))
        offsets.append(dy)
    return offsets


def speed_vs_recall(records, *, figsize=(8, 5.5)):
    """Speedup over dense against the softmax mass a method misses (1 - attention recall, log
    scale, better upwards), one point per method: records from spattn.bench() (or `spattn
    bench --json`), or their "results" list. Evaluation-only methods (they compute more than
    dense to choose what to compute) are drawn hollow: their time is no speed claim. Methods
    that miss less than 1e-6 (dense) are drawn at 1e-6."""
    results = records["results"] if isinstance(records, dict) else list(records)
    evaluation = {m["name"] for m in _core.method_catalog() if m["evaluation_only"]}
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    points = [(r["speedup"], max(1.0 - r["recall"], _MISSED_FLOOR)) for r in results]
    for r, (x, y) in zip(results, points):
        hollow = r["method"].split(":")[0] in evaluation
        ax.scatter(x, y, s=50, facecolors="none" if hollow else "C0", edgecolors="C0")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.invert_yaxis()
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("speedup over dense (median time, runs taken round-robin)")
    ax.set_ylabel("softmax mass missed (1 - attention recall; < 1e-6 drawn at 1e-6)")
    fig.canvas.draw()  # fixes the limits, so labels can be placed in display space
    order = sorted(range(len(points)), key=lambda i: points[i])
    labels = [results[i]["method"] for i in order]
    for i, dy in zip(order, _label_offsets([points[i] for i in order], labels, ax)):
        ax.annotate(results[i]["method"], points[i], textcoords="offset points",
                    xytext=(6, dy), fontsize=8, va="center")
    if isinstance(records, dict) and "config" in records:
        c = records["config"]
        src = c.get("workload", "arrays")
        ax.set_title(f"{src}, seq {c['seq']}, {c['heads']} heads, dim {c['dim']}, "
                     f"{c['dtype']}, {c['threads']} threads")
    ax.grid(alpha=0.3)
    return fig
