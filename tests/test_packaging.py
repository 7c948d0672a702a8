"""What a wheel holds: every sub-package of the sources (an editable install finds a sub-package that
pyproject.toml does not list; a wheel silently leaves it out); what its extras require of the
boosters."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from influence_gbdt.adapters.versions import (
    BESIDE,
    MINIMUM,
    check_beside,
    check_release,
    release,
)

from influence_gbdt.errors import UnsupportedModelError

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, where = set(config["packages"]), config["package-dir"]
    found = set()
    for name, folder in where.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


def test_each_boosters_extra_requires_the_release_its_adapter_reproduces() -> None:
    """``pip install "influence-gbdt[xgboost]"`` installs no release the adapter refuses, and admits
    every release it takes (``nox -s oldest`` runs the suite at these floors)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for library, floor in MINIMUM.items():
        (spec,) = extras[library]
        name, _, version = spec.partition(">=")
        assert name == library and release(version) == floor, (spec, floor)


def _written(parts: tuple[int, ...]) -> str:
    """A release as a version string, written here apart from the code under test: (3, 1) -> "3.1"."""
    return ".".join(map(str, parts))


def test_a_booster_older_than_its_floor_is_refused_with_the_release_it_needs() -> None:
    for library, floor in MINIMUM.items():
        check_release(library, _written(floor))  # the floor itself
        check_release(library, f"{floor[0]}.{floor[1] + 1}.0rc1")
        check_release(library, "dev")  # a build from source that names no release
        need, older = _written(floor), _written((*floor[:-1], floor[-1] - 1))
        said = rf"from {library} {re.escape(need)} on, and {library} {re.escape(older)} is installed"
        with pytest.raises(UnsupportedModelError, match=said):
            check_release(library, older)
    assert release("3.1.0rc1") == (3, 1, 0) and release("1.2") == (1, 2) and release("") == ()


def test_a_booster_that_cannot_read_a_data_librarys_release_is_refused_beside_it() -> None:
    """XGBoost 3.1 reads pandas 3's DataFrames as bare arrays: refused beside pandas 3, admitted beside
    pandas 2, and XGBoost 3.2 beside either."""
    for (library, other, since), (floor, _) in BESIDE.items():
        older, before = _written(MINIMUM[library]), f"{since[0] - 1}.99"
        assert MINIMUM[library] < floor
        check_beside(library, older, other, before)
        check_beside(library, _written(floor), other, before)
        check_beside(library, _written(floor), other, _written(since) + ".0")
        need = re.escape(_written(floor))
        with pytest.raises(UnsupportedModelError, match=rf"needs {library} {need} beside it"):
            check_beside(library, older, other, _written(since) + ".1")
