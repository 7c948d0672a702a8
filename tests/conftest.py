"""Shared pytest configuration: tests marked ``slow`` run only with ``--runslow`` (``nox -s loo``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run slow leave-one-out studies")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow study: run with --runslow (nox -s loo)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
