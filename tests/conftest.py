"""The suite compiles nothing that the precompiled kernels of a wheel would lack.

A wheel carries the kernels that :mod:`influence_gbdt._warmup` compiles; a kernel signature that
the package uses and the workload does not reach is compiled at a user's first use (seconds to a
minute). When the whole suite runs (``pytest`` with no test file named), the workload runs first;
every signature of the package's kernels that appears after it (compiled, or read from a cache an
earlier run left) is a signature the workload misses, and fails the run with the kernels named. The
suite's models are the models users have (every library's defaults, string labels, pandas inputs,
early stopping), so what they reach is what a user's first use reaches.

Tests that call a kernel directly, as no user does (the bit-for-bit tests of CatBoost's objective,
the losses' row primitives against finite differences), are marked ``calls_kernels``: the
signatures that appear while they run are not counted.

The workload's signatures are those it holds after compiling into an empty cache: a kernel read
from a cache holds no signature of the kernels it calls (its code is linked in), while a fresh
compile registers them as well, and so does a wheel's build. The check therefore keeps its own
kernel cache (``influence-gbdt-suite`` beside the usual one), whose first whole-suite run of a
version of the sources compiles the workload and writes its signatures to ``warmup.json`` there;
later runs read the kernels from that cache and the signatures from that file, so the check does
not depend on what an earlier run or a demo left in a cache. Where there are two cores, that first
run compiles the workload as a wheel's build does, in two processes side by side, each into an
empty cache (:func:`influence_gbdt._warmup.compile_into`, which returns their signatures), and the
suite's own run of the workload reads the kernels they compiled.

``INFLUENCE_GBDT_CHECK_COMPILES=0`` turns the check off; ``=1`` turns it on for any selection.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_CHECK: dict[str, Any] = {}


def _signatures() -> set[tuple[str, str]]:
    """(module.function, signature) of every overload the package's kernels hold in this process."""
    from influence_gbdt import _warmup

    return _warmup.signatures()


def _whole_suite(config: pytest.Config) -> bool:
    setting = os.environ.get("INFLUENCE_GBDT_CHECK_COMPILES")
    if setting is not None:
        return setting != "0"
    return all("::" not in arg and Path(arg).is_dir() for arg in config.args)


def _use_suite_cache() -> str | None:
    """Point the package's kernel cache at the check's own directory (before the package is
    imported); return the path of its ``warmup.json``, or None when the package was imported
    already or nothing is writable. A directory without that file (a run stopped during the
    workload) is emptied, so the workload compiles into an empty cache."""
    if "influence_gbdt._jit" in sys.modules:
        return None
    base = os.environ.get("NUMBA_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    parent = os.path.join(os.path.abspath(base), "influence-gbdt-suite")
    os.environ["NUMBA_CACHE_DIR"] = parent  # also read by the suite's subprocesses
    from influence_gbdt import _jit

    if _jit.CACHE_DIR is None:
        return None
    _jit._prune(parent, keep=_jit.CACHE_DIR)  # earlier versions of the sources, unused for a while
    record = os.path.join(_jit.CACHE_DIR, "warmup.json")
    if not os.path.exists(record):
        shutil.rmtree(_jit.CACHE_DIR)
        os.makedirs(_jit.CACHE_DIR)
    return record


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "calls_kernels: the test calls the package's kernels directly "
                                       "(tests/conftest.py does not count the signatures it compiles)")
    if _whole_suite(config):
        _CHECK["record"] = _use_suite_cache()


def pytest_collection_finish(session: pytest.Session) -> None:
    if not session.items or not _whole_suite(session.config):
        return
    from influence_gbdt import _jit, _warmup

    start = time.perf_counter()
    record = _CHECK.get("record")
    seen: set[tuple[str, str]] = set()
    if record and not os.path.exists(record) and _jit.CACHE_DIR and _warmup.processes() > 1:
        # compiled in two processes side by side into the suite's cache, which run() below reads
        seen = _warmup.compile_into(_jit.CACHE_DIR)
    _warmup.run()
    seen |= _signatures()
    if record and os.path.exists(record):
        with open(record) as fh:
            seen |= {tuple(pair) for pair in json.load(fh)}
    elif record:
        with open(record, "w") as fh:
            json.dump(sorted(seen), fh)
    _CHECK["seen"] = seen
    _CHECK["seconds"] = time.perf_counter() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    exempt = "seen" in _CHECK and item.get_closest_marker("calls_kernels") is not None
    before = _signatures() if exempt else set()
    yield
    if exempt:
        _CHECK["seen"] |= _signatures() - before


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if "seen" not in _CHECK:
        return
    missed = sorted(_signatures() - _CHECK["seen"])
    terminalreporter.write_line(
        f"kernel warmup (the wheel's precompiled set) ran in {_CHECK['seconds']:.1f} s; "
        f"signatures the suite used beyond it: {len(missed)}")
    if missed:
        terminalreporter.write_line(
            "these kernel signatures are used by the tests but not compiled by "
            "influence_gbdt/_warmup.py, so an installed wheel would compile them at first use; "
            "extend the workload to reach them:", red=True)
        for name, sig in missed:
            terminalreporter.write_line(f"  {name}{sig}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "seen" in _CHECK and _signatures() - _CHECK["seen"] and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def no_compile_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep out of stderr the one-line notice that kernels are being compiled, for tests that read
    stderr line for line: it appears when such a test is the first to need a kernel not yet cached
    (CI warms every kernel before the tests; a local run may not have)."""
    monkeypatch.setenv("INFLUENCE_GBDT_QUIET", "1")
