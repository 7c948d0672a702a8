"""Plots: each draws on the Axes it is given (or a new one), labels it, and saves as an image."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from influence_gbdt import InputError  # noqa: E402
from influence_gbdt.demo import roc_auc  # noqa: E402
from influence_gbdt.plots import (  # noqa: E402
    plot_noise_roc,
    plot_removal_curve,
    plot_score_distribution,
    plot_top_rows,
    roc_curve,
    save_summary,
    summary_figure,
)


@pytest.fixture
def data() -> tuple[pd.Series, pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"age": rng.integers(18, 80, 60), "job": rng.choice(["a", "b"], 60),
                      "hours": rng.normal(40, 5, 60)}, index=[f"r{i}" for i in range(60)])
    y = rng.integers(0, 2, 60)
    return pd.Series(rng.normal(size=60), index=X.index), X, y


def _saved(ax: plt.Axes, tmp_path) -> bytes:
    path = tmp_path / "figure.png"
    ax.figure.savefig(path)
    plt.close(ax.figure)
    return path.read_bytes()


def _labelled(ax: plt.Axes) -> None:
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_top_rows_shows_the_extremes_with_their_own_keys(data, tmp_path) -> None:
    scores, X, y = data
    ax = plot_top_rows(scores, X, y, n=3, features=["age", "job"])
    _labelled(ax)
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    order = scores.sort_values(ascending=False).index
    assert len(ticks) == 6 and ticks[0].startswith(f"{order[0]} |") and ticks[-1].startswith(f"{order[-1]} |")
    first = X.loc[order[0]]
    assert f"label={y[X.index.get_loc(order[0])]}" in ticks[0] and f"job={first['job']}" in ticks[0]
    assert [p.get_width() for p in ax.patches][:3] == list(scores[order[:3]])
    assert _saved(ax, tmp_path).startswith(b"\x89PNG")


def test_distribution_roc_and_removal_curve_draw_on_given_axes(data, tmp_path) -> None:
    scores, _, y = data
    _fig, axes = plt.subplots(1, 3)
    assert plot_score_distribution(scores.to_numpy(), y, ax=axes[0]) is axes[0]
    assert len(axes[0].get_legend().get_texts()) == 2
    assert plot_noise_roc(y == 1, {"score": scores.to_numpy()}, ax=axes[1]) is axes[1]
    curve = pd.DataFrame({"strategy": ["leaf_refit"] * 2 + ["random"] * 4, "m": [5, 10, 5, 5, 10, 10],
                          "repeat": [0, 0, 0, 1, 0, 1], "test_reduction": [0.1, 0.2, 0.0, 0.02, -0.01, 0.01]})
    assert plot_removal_curve(curve, ax=axes[2]) is axes[2]
    for ax in axes:
        _labelled(ax)
    assert _saved(axes[0], tmp_path).startswith(b"\x89PNG")


def test_roc_curve_area_is_the_rank_statistic_with_ties() -> None:
    # Independent reference: the Mann-Whitney rank formula of the demo (ties count one half).
    rng = np.random.default_rng(1)
    positive = rng.random(500) < 0.2
    score = np.round(rng.normal(size=500) + positive, 1)  # many ties
    fpr, tpr = roc_curve(positive, score)
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    area = np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2)
    assert area == pytest.approx(roc_auc(positive, score), rel=1e-12)


def test_summary_file_and_bad_inputs(data, tmp_path) -> None:
    scores, X, y = data
    save_summary(scores, X, y, tmp_path / "summary.png", n=4)
    assert (tmp_path / "summary.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(InputError, match="one score per training row"):
        plot_top_rows(np.zeros((60, 2)), X, y)
    with pytest.raises(InputError, match="not columns of X"):
        plot_top_rows(scores, X, y, features=["income"])
    with pytest.raises(InputError, match="removal_curve"):
        plot_removal_curve(pd.DataFrame({"m": [1]}))
    with pytest.raises(InputError, match="both positive and negative"):
        roc_curve(np.ones(3, dtype=bool), np.arange(3.0))
    plt.close("all")


def _texts_inside_and_apart(fig: plt.Figure) -> None:
    """Everything each axes draws (title, axis labels, tick labels, value labels) lies inside the
    figure, and no two drawn x tick labels overlap each other or the axis label."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for ax in fig.axes:
        extent = ax.get_tightbbox(renderer)
        assert (extent.x0 >= box.x0 - 1 and extent.y0 >= box.y0 - 1 and extent.x1 <= box.x1 + 1
                and extent.y1 <= box.y1 + 1), f"{ax.get_title()!r}: drawn beyond the figure"
        low, high = sorted(ax.get_xlim())
        ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels()
                 if t.get_text().strip() and low <= t.get_position()[0] <= high]
        for a, b in itertools.pairwise(ticks):
            assert not a.overlaps(b), "x tick labels overlap"
        label = ax.xaxis.label.get_window_extent(renderer)
        assert not any(t.overlaps(label) for t in ticks), "an x tick label overlaps the axis label"
        assert not ax.xaxis.get_offset_text().get_text(), "the power of ten belongs in the label"


def _adult_like(n: int = 400) -> tuple[pd.Series, pd.DataFrame, np.ndarray]:
    """Long rows (14 columns, long category names) and scores of ~1e-6, as influence scores are."""
    rng = np.random.default_rng(4)
    X = pd.DataFrame({f"numeric-column-{j}": rng.normal(50, 10, n) for j in range(8)}
                     | {f"category-{j}": rng.choice(["Never-married", "Married-civ-spouse", "Widowed"], n)
                        for j in range(6)})
    X.loc[7, "numeric-column-3"] = 1e5  # one row far out in one column
    return pd.Series(rng.normal(scale=3e-6, size=n)), X, rng.integers(0, 2, n)


def test_every_plot_keeps_its_texts_inside_at_its_default_size(tmp_path) -> None:
    scores, X, y = _adult_like()
    title = "Test row 809 (label 1, P(>50K) = 0.00): most harmful (top) and most helpful training rows"
    ax = plot_top_rows(scores, X, y, title=title)
    _texts_inside_and_apart(ax.figure)
    assert ax.xaxis.label.get_text().endswith(("x 1e-6", "x 1e-5"))
    assert len(ax.texts) == 10  # each bar carries its value
    plt.close("all")
    _texts_inside_and_apart(plot_top_rows(scores, X[["numeric-column-0"]], y, title=title).figure)
    plt.close("all")
    ax = plot_top_rows(scores, X, y, n=4)
    row7 = [t.get_text() for t in ax.get_yticklabels() if t.get_text().startswith("7 |")]
    if row7:  # the far-out column is what the row shows first
        assert "numeric-column-3=1e+05" in row7[0]
    plt.close("all")
    _texts_inside_and_apart(plot_score_distribution(scores, y).figure)
    plt.close("all")
    curve = pd.DataFrame({"strategy": ["leaf_refit"] * 5 + ["random"] * 5, "m": [10, 20, 50, 100, 200] * 2,
                          "repeat": 0, "test_reduction": np.linspace(1e-4, 5e-3, 10)})
    ax = plot_removal_curve(curve)
    assert ax.get_xscale() == "log"
    _texts_inside_and_apart(ax.figure)
    plt.close("all")
    _texts_inside_and_apart(plot_noise_roc(y == 1, {"influence": scores.to_numpy()}).figure)
    plt.close("all")
    for on in ("loss", "prediction"):  # the CLI's --plot
        _texts_inside_and_apart(summary_figure(scores, X, y, on=on))
        plt.close("all")


def test_top_rows_puts_each_rows_unusual_values_first() -> None:
    X = pd.DataFrame({"a": np.arange(100.0), "b": np.zeros(100), "job": ["clerk"] * 99 + ["pilot"]})
    X.loc[50, "b"] = 9.0  # row 50: ordinary a (the median), an outlying b
    scores = pd.Series(np.zeros(100))
    scores[50], scores[99] = 1.0, 0.5
    ax = plot_top_rows(scores, X, np.zeros(100, dtype=int), n=2)
    ticks = {t.get_text().split(" |")[0]: t.get_text() for t in ax.get_yticklabels()}
    assert ticks["50"].split("| ")[-1].startswith("b=9")
    assert ticks["99"].split("| ")[-1].startswith(("a=99", "job=pilot"))
    assert ax.containers[0].datavalues[0] == 1.0
    plt.close("all")
