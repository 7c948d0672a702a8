"""Markdown reports of studies, with scatter plots of predicted vs actual (matplotlib optional)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .studies import LOOStudy


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A DataFrame as a GitHub Markdown table (floats with ``floatfmt``, NaN and NA as blanks)."""

    def fmt(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(float(v), floatfmt)
        return "" if v is pd.NA or v is None else str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def render_study(study: LOOStudy, title: str, plot_stem: str | None = None, level: int = 1,
                 plot_methods: Sequence[str] | None = None) -> str:
    """Markdown section of a study; with ``plot_stem``, scatter plots are saved as
    ``<plot_stem>_<method>.png`` and linked by their file names (keep them next to the text).
    ``plot_methods`` limits the plots to these method labels (default all)."""
    kept = study.kept
    loo = study.kind == "leave-one-out"
    what = ("Removed rows" if loo else f"Rows with weight moved by +-{study.eps:g}")
    truth = ("actual = L(F) - L(F without row) after retraining" if loo else
             "actual = (L(w + eps) - L(w - eps)) / (2 eps) after retraining, an estimate of dL/dw")
    lines = [
        f"{'#' * level} {title}", "",
        f"{what}: {study.rows.size}; test points: {study.actual.shape[1]}; structure kept for "
        f"{int(kept.sum())} of {kept.size} rows ({kept.mean():.0%}). {truth}.",
        f"Largest |actual|: {np.abs(study.actual).max():.3g}. "
        f"Retraining took {study.seconds.get('retrain', float('nan')):.1f} s.", "",
        "Errors are max |score - actual| (relative: divided by the largest |actual| in the subset); "
        "correlations are over all (row, test point) pairs; sign agreement ignores actual changes of 0; "
        f"NDCG@{study.ndcg_k} ranks rows per test point by the score, gains = max(actual, 0).", "",
        markdown_table(study.summary), "",
    ]
    if plot_stem is not None:
        lines += _scatter_plots(study, plot_stem, plot_methods)
    return "\n".join(lines)


def write_report(study: LOOStudy, path: str | os.PathLike[str], title: str | None = None,
                 plots: bool = True) -> str:
    """Write a Markdown report of a study (and its scatter plots next to it).

    Parameters
    ----------
    study : LOOStudy
    path : path of the ``.md`` file; plots go to ``<stem>_<method>.png`` in the same folder.
    title : str, optional
        Default "Leave-one-out validation" or "Finite-difference validation".
    plots : bool
        Draw scatter plots of predicted vs actual (kept vs changed structure). Skipped with a note in
        the report if matplotlib is not installed.

    Returns
    -------
    str
        The Markdown text written.
    """
    path = os.fspath(path)
    if title is None:
        loo = study.kind == "leave-one-out"
        title = "Leave-one-out validation" if loo else "Finite-difference validation"
    text = render_study(study, title, os.path.splitext(path)[0] if plots else None)
    with open(path, "w") as fh:
        fh.write(text)
    return text


def _scatter_plots(study: LOOStudy, stem: str, labels: Sequence[str] | None) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["_Plots skipped: matplotlib is not installed (pip install influence-gbdt[plot])._", ""]
    kept = study.kept
    xlabel = ("actual L(F) - L(F without row)" if study.kind == "leave-one-out"
              else "finite difference dL/dw")
    lines = []
    for label, s in study.scores.items():
        if labels is not None and label not in labels:
            continue
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        groups = ((kept, "structure kept", "tab:blue"), (~kept, "structure changed", "tab:orange"))
        for sel, name, color in groups:
            if sel.any():
                ax.scatter(study.actual[sel].ravel(), s[sel].ravel(), s=6, alpha=0.6, c=color, label=name)
        lim = [float(min(study.actual.min(), s.min())), float(max(study.actual.max(), s.max()))]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        fig.tight_layout()
        png = f"{stem}_{label.replace('/', '_')}.png"
        fig.savefig(png, dpi=100)
        plt.close(fig)
        lines += [f"![{label}]({os.path.basename(png)})", ""]
    return lines
