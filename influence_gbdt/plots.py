"""Figures of influence scores (the ``[plot]`` extra: matplotlib).

Every function draws on ``ax`` (a new figure's axes when None) and returns the Axes, as shap's and
scikit-learn's plotting functions do, so figures compose. Nothing here computes influence: the
functions take scores from :meth:`BoostingInfluence.score_training_points` (NumPy or pandas), the
output of :func:`influence_gbdt.validation.removal_curve`, or any detector's scores.

Sign convention: a score > 0 means the training row is harmful (drawn in red), < 0 helpful (blue).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from .errors import InputError, require

HARMFUL, HELPFUL, NEUTRAL = "#c0392b", "#2471a3", "#7f8c8d"


def _axes(ax: Any, size: tuple[float, float] = (7, 4.5)) -> Any:
    if ax is not None:
        return ax
    plt = require("matplotlib.pyplot", "plot", "Plotting")
    return plt.subplots(figsize=size, layout="constrained")[1]


def _power(values: NDArray[np.float64]) -> int:
    """The power of ten a score axis is labelled in: 0 for scores of 0.01 to 10,000, else that of
    the largest score."""
    top = float(np.max(np.abs(values))) if values.size else 0.0
    return int(np.floor(np.log10(top))) if top > 0 and not 1e-2 <= top < 1e4 else 0


def _score_axis(axis: Any, values: NDArray[np.float64], label: str) -> None:
    """Label a score axis with ``label``; scores far from 1 (influence scores are often ~1e-6) get
    their power of ten in the label, not as matplotlib's offset text (which overlaps the label),
    and at most six ticks, so their labels never overlap."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    power = _power(values)
    axis.set_major_locator(MaxNLocator(nbins=6))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 10.0**power:g}"))
    axis.set_label_text(label if power == 0 else f"{label}, x 1e{power}")


def _standout(frame: pd.DataFrame, rows: NDArray[np.int64], k: int) -> list[list[Any]]:
    """For each of ``rows``, the ``k`` columns where it is most unusual among all rows of ``frame``:
    a number by the share of rows closer to the column's median, a category by the share of rows
    whose category is more common (0 = the most ordinary, near 1 = few rows are as unusual)."""
    unusual = np.zeros((rows.size, frame.shape[1]))
    for c, name in enumerate(frame.columns):
        col = frame[name]
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            values = col.to_numpy(dtype=np.float64)
            deviation = np.abs(values - np.nanmedian(values))
            closer = np.sort(deviation[np.isfinite(deviation)])
            picked = np.nan_to_num(deviation[rows], nan=0.0)
            unusual[:, c] = np.searchsorted(closer, picked, side="left") / max(closer.size, 1)
        else:
            text = col.astype(str)
            share = text.map(text.value_counts(normalize=True)).to_numpy(dtype=np.float64)
            more_common = -np.sort(share)[::-1]
            unusual[:, c] = np.searchsorted(more_common, -share[rows], side="left") / share.size
    order = np.argsort(-unusual, axis=1, kind="stable")[:, :k]
    return [[frame.columns[c] for c in row] for row in order]


def _one_score_per_row(scores: Any, n: int | None = None) -> pd.Series:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or (n is not None and values.size != n):
        raise InputError(
            f"Expected one score per training row (shape ({n if n is not None else 'n_train'},)), got "
            f"shape {values.shape}: pass aggregate='mean', or one column S[:, j] for test point j."
        )
    return scores if isinstance(scores, pd.Series) else pd.Series(values)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (float, np.floating)) else str(value)


def plot_top_rows(
    scores: ArrayLike | pd.Series,
    X: Any,
    y: ArrayLike,
    n: int = 5,
    features: Sequence[Any] | None = None,
    ax: Any = None,
    title: str | None = None,
) -> Any:
    """The ``n`` most harmful and ``n`` most helpful training rows as a horizontal bar chart.

    Each bar is labelled with the row's own key (its index label, else its position), its label and
    feature values, and carries its score.

    Parameters
    ----------
    scores : array-like or Series of shape (n_train,)
        One score per training row, e.g. ``score_training_points(X_test.iloc[[j]], y_test[[j]])``'s
        single column (one prediction) or an aggregated score; > 0 = harmful.
    X : DataFrame or array of shape (n_train, n_features)
        The training rows (to show their features).
    y : array-like of shape (n_train,)
        The training labels.
    n : int
        Rows shown per side.
    features : sequence, optional
        Columns of ``X`` to show next to each row. Default: for each row, the three in which it is
        most unusual among the training rows (a value far from the median, a rare category).
    ax : matplotlib Axes, optional
        Default: a new figure sized to the labels.
    title : str, optional
        Default: what is drawn; name the scored test point (and its prediction) here.

    Returns
    -------
    matplotlib Axes
    """
    frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X))
    s = _one_score_per_row(scores, len(frame))
    labels = np.asarray(y)
    keys = s.index if isinstance(scores, pd.Series) else frame.index
    if features is not None:
        unknown = [f for f in features if f not in frame.columns]
        if unknown:
            raise InputError(f"features {unknown} are not columns of X ({list(frame.columns)[:10]} ...).")
    values = s.to_numpy()
    order = np.argsort(-values, kind="stable")
    pick = np.concatenate([order[:n], order[::-1][:n][::-1]]) if values.size > 2 * n else order
    shown = [list(features)] * pick.size if features is not None else _standout(frame, pick, 3)
    texts = []
    for i, names in zip(pick, shown, strict=True):
        cells = ", ".join(f"{f}={_cell(frame[f].iloc[i])}" for f in names)
        texts.append(f"{keys[i]} | label={labels[i]} | {cells}")
    width = 5.5 + 0.065 * max((len(t) for t in texts), default=0)  # room for the row labels
    ax = _axes(ax, (min(width, 16.0), max(3.5, 0.35 * pick.size + 1.8)))
    ypos = np.arange(pick.size)[::-1]
    bars = ax.barh(ypos, values[pick], color=[HARMFUL if v > 0 else HELPFUL for v in values[pick]])
    ax.set_yticks(ypos, texts, fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    _score_axis(ax.xaxis, values[pick], "influence score (> 0 = harmful, < 0 = helpful)")
    power = _power(values[pick])
    ax.bar_label(bars, labels=[f"{v / 10.0**power:+.3g}" for v in values[pick]], fontsize=7, padding=2)
    ax.margins(x=0.18)  # room for the values at the bars' ends
    ax.set_ylabel("training row | label | features")
    # Wrapped to the axes' width, the figure's less the row labels' (~9 characters of the title's
    # font per inch): a long title naming the test point would otherwise run past the figure.
    label_chars = max((len(t) for t in texts), default=0)
    share = ax.get_position().width * ax.figure.get_figwidth()  # inches of the figure this axes spans
    chars = max(30, int(9 * (share - 0.065 * label_chars)))
    ax.set_title(textwrap.fill(title or "Most harmful (top) and most helpful (bottom) training rows", chars))
    return ax


def plot_score_distribution(
    scores: ArrayLike | pd.Series, y: ArrayLike, bins: int = 60, ax: Any = None
) -> Any:
    """Histograms of the scores of the training rows of each label (or class).

    Parameters
    ----------
    scores : array-like or Series of shape (n_train,)
        One score per training row (> 0 = harmful).
    y : array-like of shape (n_train,)
        The label (or any grouping, e.g. "flipped") of each row.
    bins : int
        Shared bins over the 0.5-99.5% range of the scores (the tails go to the end bins).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes, log-scaled counts.
    """
    values = _one_score_per_row(scores).to_numpy()
    groups = np.asarray(y)
    if groups.shape != values.shape:
        raise InputError(
            f"y has shape {groups.shape}, the scores {values.shape}: one label per training row."
        )
    lo, hi = np.percentile(values, [0.5, 99.5])
    if hi <= lo:
        lo, hi = float(values.min()) - 0.5, float(values.max()) + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    ax = _axes(ax)
    for group in pd.unique(groups):
        part = np.clip(values[groups == group], lo, hi)
        ax.hist(part, bins=edges, histtype="step", linewidth=1.5, label=f"{group} ({part.size} rows)")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    _score_axis(ax.xaxis, edges, "influence score (> 0 = harmful)\ntails clipped to the end bins")
    ax.set_ylabel("training rows")
    ax.set_title("Scores by label")
    ax.legend(title="label", fontsize=8)
    return ax


def plot_removal_curve(curve: pd.DataFrame, target: str = "test_reduction", ax: Any = None) -> Any:
    """The real change of the test loss after removing the top-``m`` rows and retraining.

    Parameters
    ----------
    curve : DataFrame
        The output of :func:`influence_gbdt.validation.removal_curve` (columns ``strategy``, ``m``,
        ``repeat`` and ``target``).
    target : {"test_reduction", "target_reduction", "relative_target_reduction"}
        Which measured reduction to draw (> 0 = the removal lowered the loss).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes: one line per strategy; random removals as their mean with a band of +- one
    standard deviation over the repeats.
    """
    missing = [c for c in ("strategy", "m", target) if c not in curve.columns]
    if missing:
        raise InputError(f"curve has no columns {missing}: pass the DataFrame of validation.removal_curve.")
    ax = _axes(ax)
    stats = curve.groupby(["strategy", "m"])[target].agg(["mean", "std"]).reset_index()
    for strategy, part in stats.groupby("strategy", sort=False):
        # float arrays: matplotlib 3.7 with pandas 2.0 fails on a Series of ints in fill_between
        m, mean = part["m"].to_numpy(dtype=np.float64), part["mean"].to_numpy(dtype=np.float64)
        if strategy == "random":
            ax.plot(m, mean, color=NEUTRAL, marker="o", linestyle="--", label="random rows")
            spread = part["std"].fillna(0).to_numpy(dtype=np.float64)
            ax.fill_between(m, mean - spread, mean + spread, color=NEUTRAL, alpha=0.2)
        else:
            ax.plot(m, mean, marker="o", label=f"most harmful by {strategy}")
    ax.axhline(0, color="black", linewidth=0.8)
    removed = np.unique(stats["m"].to_numpy(dtype=np.float64))
    if removed.size > 2 and removed[removed > 0].size and removed.max() > 10 * removed[removed > 0].min():
        if removed.min() <= 0:
            ax.set_xscale("symlog", linthresh=1)
        else:
            ax.set_xscale("log")
        ax.set_xticks(removed, [f"{m:g}" for m in removed])
        ax.minorticks_off()
    ax.set_xlabel("training rows removed (model retrained without them)")
    ax.set_ylabel(f"{target.replace('_', ' ')} (> 0 = loss lowered)")
    ax.set_title("Removal curve: retraining without the top-m rows")
    ax.legend(fontsize=8)
    return ax


def roc_curve(is_positive: ArrayLike, score: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """False- and true-positive rates of ranking by ``score`` (descending), ties as one step.

    Returns
    -------
    fpr, tpr : ndarrays of shape (n_thresholds + 1,), both from 0 to 1.
    """
    pos = np.asarray(is_positive, dtype=bool)
    s = np.asarray(score, dtype=np.float64)
    if pos.shape != s.shape or pos.all() or not pos.any():
        raise InputError("A ROC curve needs one score per row and both positive and negative rows.")
    order = np.argsort(-s, kind="stable")
    s, pos = s[order], pos[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # the last row of each tie group
    tp = np.cumsum(pos)[last]
    fp = (last + 1) - tp
    return np.r_[0.0, fp / fp[-1]], np.r_[0.0, tp / tp[-1]]


def plot_noise_roc(is_noisy: ArrayLike, detectors: Mapping[str, ArrayLike], ax: Any = None) -> Any:
    """ROC curves of finding noisy (e.g. flipped-label) rows by several detectors' scores.

    Parameters
    ----------
    is_noisy : array-like of bool of shape (n_train,)
        The known noisy rows.
    detectors : mapping of name to array-like of shape (n_train,)
        Scores where larger = more likely noisy (influence scores already are: > 0 = harmful).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes, with each detector's ROC-AUC in the legend.
    """
    ax = _axes(ax)
    for name, score in detectors.items():
        fpr, tpr = roc_curve(is_noisy, np.asarray(score))
        auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))  # trapezoids: ties count half
        ax.plot(fpr, tpr, label=f"{name} (AUC {auc:.3f})")
    ax.plot([0, 1], [0, 1], color=NEUTRAL, linestyle=":", label="chance (AUC 0.5)")
    ax.set_xlabel("false-positive rate (clean rows flagged)")
    ax.set_ylabel("true-positive rate (noisy rows found)")
    ax.set_title("Finding noisy labels")
    ax.set_aspect("equal")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def summary_figure(
    scores: ArrayLike | pd.Series, X: Any, y: ArrayLike, on: str = "loss", n: int = 10,
    title: str | None = None,
) -> Any:
    """The figure of ``influence-gbdt score --plot``: the top rows (:func:`plot_top_rows`) beside the
    scores by label (:func:`plot_score_distribution`). Returns the matplotlib Figure."""
    plt = require("matplotlib.pyplot", "plot", "Plotting")
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, max(4.5, 0.32 * 2 * n + 1.5)), layout="constrained",
                                      width_ratios=(3, 2))
    plot_top_rows(scores, X, y, n=n, ax=left, title=title)
    plot_score_distribution(scores, y, ax=right)
    if on == "prediction":
        for ax in (left, right):
            label = ax.get_xlabel().replace("influence score (> 0 = harmful, < 0 = helpful)", _ON_PREDICTION)
            ax.set_xlabel(label.replace("influence score (> 0 = harmful)", _ON_PREDICTION))
    return fig


_ON_PREDICTION = "effect on the raw prediction (> 0 = the row raises it)"


def save_summary(
    scores: ArrayLike | pd.Series, X: Any, y: ArrayLike, path: str | Path, on: str = "loss", n: int = 10
) -> None:
    """:func:`summary_figure`, saved to ``path``."""
    plt = require("matplotlib.pyplot", "plot", "Plotting")
    fig = summary_figure(scores, X, y, on=on, n=n)
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
