"""What a wheel holds: every sub-package of the sources (an editable install finds a sub-package that
pyproject.toml does not list; a wheel silently leaves it out)."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
