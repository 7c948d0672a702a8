"""The oldest release of each booster that the adapters reproduce, and what differs above it.

``pyproject.toml``'s extras (``xgboost>=3.1``, ...) state the same floors, and a test checks that the
two agree. ``nox -s oldest`` runs the test suite against every requirement's floor. Below these
releases the boosters compute or store models otherwise than the adapters model them (measured
with the adapters' tests, 2026-11-30, at XGBoost 2.1.0, 3.1.0 and 3.1.3, LightGBM 4.0.0, 4.3.0 to 4.6.0,
CatBoost 1.2 to 1.2.5):

- XGBoost 2.1 estimates a binary, Poisson, gamma or Tweedie model's intercept by one Newton step
  from margin 0 (so does 3.0, by its source at v3.0.5, not run here; 3.1 takes the weighted label
  mean, as 3.2), none for a multiclass model (0.5), and one base score for every target of a
  multi-target model.
- LightGBM 4.3 and 4.0 reproduce ``cross_entropy`` models only to 2e-8, and 4.0 renews unweighted
  L1 and quantile leaves otherwise.
- CatBoost 1.2 to 1.2.2 name boolean classes ``'False'``, ``'True'``; up to 1.2.5 a Lossguide
  multiclass model's trees read otherwise.

Most of these surfaced as a refusal naming another cause (the data, a parameter); a few as scores
of a model reproduced only to 2e-8. So a model whose library is older is refused up front, with the
release it needs.

Within the supported releases the adapters follow what differs:

- XGBoost 3.1 reads pandas 3's DataFrames as bare arrays (:data:`BESIDE`): beside pandas 3 it
  loses column names, categories and nullable values, so it is refused there.
- XGBoost 3.1 stores a multiclass intercept as the class shares and adds them to the margins as
  they are (3.2: their centred logs), and writes vector leaves to ``base_weights`` (3.2:
  ``leaf_weights``); both are read either way (:mod:`.xgboost_objectives`, :mod:`.xgboost_trees`).
  A 3.1 multiclass model loaded into 3.2 keeps its shares (tests/adapters/models); XGBoost 3.2.0
  itself crashes (a segmentation fault) loading a 3.1 vector-leaf model.
- LightGBM 4.4 to 4.6 renew the leaves and the boost_from_average init score of *weighted*
  ``regression_l1`` and ``quantile`` models with another weighted percentile than 4.7; the engine
  models both, and the adapter takes the one that reproduces the model
  (:mod:`.lightgbm_objectives`, ``PERCENTILE_RULES``). Their models pass the adapters' tests
  (4.4 and 4.5 beside scikit-learn 1.7: their scikit-learn wrappers call
  ``check_X_y(force_all_finite=...)``, which scikit-learn 1.8 removed). Their ``Booster.refit`` of
  a model read from a string took the default objective (LightGBM #6851), which only the tests
  use.
"""

from __future__ import annotations

import importlib
import re

from influence_gbdt.errors import UnsupportedModelError

#: Library -> the oldest release the adapters reproduce (pyproject.toml's ``>=`` floors).
MINIMUM: dict[str, tuple[int, ...]] = {
    "xgboost": (3, 1),
    "lightgbm": (4, 4),
    "catboost": (1, 2, 6),
}

#: (library, other package, the other's first release that needs more) -> (the library's oldest
#: release beside it, what older ones do). XGBoost 3.1 does not recognise pandas 3's DataFrames (it
#: checks the class's module, ``pandas.core.frame``, which pandas 3 names ``pandas``) and reads them
#: as bare arrays (measured, 3.1.3 with pandas 3.1.1).
BESIDE: dict[tuple[str, str, tuple[int, ...]], tuple[tuple[int, ...], str]] = {
    ("xgboost", "pandas", (3,)): (
        (3, 2),
        "reads pandas 3's DataFrames as bare arrays, without column names, categories or nullable values",
    ),
}


def release(version: str) -> tuple[int, ...]:
    """The numeric release a version string starts with: ``"3.1.0rc1"`` -> ``(3, 1, 0)``,
    ``"1.2"`` -> ``(1, 2)``; ``()`` if it starts with no number."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def dotted(parts: tuple[int, ...]) -> str:
    """A release as written: ``(3, 1)`` -> ``"3.1"``."""
    return ".".join(str(part) for part in parts)


def check_release(library: str, version: str) -> None:
    """Raise :class:`~influence_gbdt.errors.UnsupportedModelError` if ``version`` of ``library`` (a
    key of :data:`MINIMUM`) is older than its floor. A version that starts with no release number (a
    build from source without one) passes."""
    floor = MINIMUM[library]
    found = release(version)
    if found and found < floor:
        need = dotted(floor)
        raise UnsupportedModelError(
            f"influence-gbdt reproduces {library} models from {library} {need} on, and "
            f"{library} {version} is installed: older releases compute or store some leaf values, base "
            f"scores or classes otherwise (influence_gbdt/adapters/versions.py). Upgrade it (pip install -U "
            f"\"{library}>={need}\") and retrain the model with it."
        )


def check_beside(library: str, version: str, other: str, other_version: str) -> None:
    """Raise :class:`~influence_gbdt.errors.UnsupportedModelError` if ``version`` of ``library`` is
    older than :data:`BESIDE` asks beside ``other_version`` of ``other``."""
    found, found_other = release(version), release(other_version)
    for (lib, name, since), (floor, why) in BESIDE.items():
        if (lib, name) == (library, other) and found and found < floor and found_other >= since:
            raise UnsupportedModelError(
                f"{library} {version} {why} ({other} {other_version} is installed), so influence-gbdt "
                f"needs {library} {dotted(floor)} beside it (influence_gbdt/adapters/versions.py). Upgrade "
                f"it (pip install -U \"{library}>={dotted(floor)}\") and retrain the model with it, or use "
                f"{other} older than {dotted(since)}."
            )


def require(library: str) -> None:
    """:func:`check_release` for the installed ``library`` (imported: the model comes from it), and
    :func:`check_beside` for the installed packages it pairs with."""
    version = _installed(library)
    check_release(library, version)
    for lib, other, _ in BESIDE:
        if lib == library:
            check_beside(library, version, other, _installed(other))


def _installed(package: str) -> str:
    """The installed release of ``package`` (imported), ``""`` if it names none."""
    return str(getattr(importlib.import_module(package), "__version__", ""))
