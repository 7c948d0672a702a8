"""The regressors' links (:mod:`influence_gbdt.links`): each is increasing and its two maps are
inverse to each other, checked against the closed forms on a grid of margins."""

from __future__ import annotations

import numpy as np
import pytest

from influence_gbdt.links import LINKS

MARGINS = np.linspace(-30.0, 30.0, 2001)
CLOSED_FORMS = {
    "identity": lambda m: m,
    "log": np.exp,
    "logit": lambda m: 1.0 / (1.0 + np.exp(-m)),
    "softplus": lambda m: np.log1p(np.exp(m)),
    "signed_square": lambda m: np.sign(m) * m**2,
}


@pytest.mark.parametrize("name", sorted(LINKS))
def test_each_link_is_increasing_and_inverts(name: str) -> None:
    link = LINKS[name]
    m = MARGINS[(MARGINS > -15) & (MARGINS < 15)] if name == "logit" else MARGINS  # sigmoid saturates
    p = link.prediction(m)
    np.testing.assert_allclose(p, CLOSED_FORMS[name](m), rtol=1e-12)
    assert (np.diff(p) > 0).all()
    assert (p > link.lowest).all() and (p < link.highest).all()
    # the inverse loses what the prediction's rounding lost: |dm| ~ eps |p / p'(m)|
    np.testing.assert_allclose(link.margin(p), m, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(LINKS))
def test_bounds_outside_the_predictions_become_infinite_margins(name: str) -> None:
    link = LINKS[name]
    assert link.margin(np.inf) == np.inf and link.margin(-np.inf) == -np.inf
    if np.isfinite(link.lowest):
        assert link.margin(link.lowest) == -np.inf and link.margin(link.lowest - 1.0) == -np.inf
    if np.isfinite(link.highest):
        assert link.margin(link.highest) == np.inf and link.margin(link.highest + 1.0) == np.inf
