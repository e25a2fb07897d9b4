"""spattn.plot: each function returns a matplotlib Figure holding what it claims to draw."""
import numpy as np
import pytest

import spattn

pytest.importorskip("matplotlib")
import spattn.plot  # noqa: E402


def test_mask_figure(tmp_path):
    w = spattn.workload("text", seq=512, heads=2, dim=64)
    fig = spattn.plot.mask(*w, "a_shape:sink=64,local=64", head=1)
    images = [ax.get_images()[0].get_array() for ax in fig.axes[:3]]
    want = spattn.block_mask(*w, "a_shape:sink=64,local=64")[1]
    # Panel 1: kept blocks 1, skipped causal 0, non-causal 2.
    np.testing.assert_array_equal(np.asarray(images[0]) == 1, want)
    assert (np.asarray(images[0])[np.triu_indices(8, 1)] == 2).all()
    # The oracle keeps as many blocks per row, and at least the mass the method keeps.
    assert ((np.asarray(images[1]) == 1).sum(axis=1) == want.sum(axis=1)).all()
    assert "oracle" in fig.axes[1].get_title()
    fig.savefig(tmp_path / "mask.png")
    assert (tmp_path / "mask.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="builds no block mask"):
        spattn.plot.mask(*w, "blasst:lambda=1e-3")


def test_sparsity_vs_length_figures():
    c = spattn.calibrate(lengths=[1024, 2048], heads=2, dim=64, samples=1)
    fig = spattn.plot.sparsity_vs_length(c, lambdas=3)
    lines = fig.axes[0].get_lines()
    assert 1 <= len(lines) <= 3 and list(lines[0].get_xdata()) == [1024, 2048]
    e = spattn.evaluate_calibration(c, lengths=[1024, 2048], heads=2, dim=64, samples=1,
                                    targets=[0.4, 0.6])
    fig = spattn.plot.sparsity_vs_length(e)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sorted(labels) == ["calibrated, target 40%", "calibrated, target 60%",
                              f"fixed lambda {e['fixed_lambda']:.3g}"]


def test_speed_vs_recall_figure():
    records = spattn.bench(methods=["a_shape:sink=64,local=64", "oracle_topk"], seq=256,
                           heads=2, dim=64, repeat=1)
    fig = spattn.plot.speed_vs_recall(records)
    ax = fig.axes[0]
    assert len(ax.collections) == 3
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["a_shape:sink=64,local=64", "dense", "oracle_topk"]
    # Dense sits at speedup 1 and the floor of missed mass; a_shape misses some.
    np.testing.assert_allclose(ax.collections[0].get_offsets()[0], [1.0, 1e-6])
    a_shape = records["results"][1]
    np.testing.assert_allclose(ax.collections[1].get_offsets()[0],
                               [a_shape["speedup"], 1 - a_shape["recall"]])
    assert spattn.plot.speed_vs_recall(records["results"]).axes
