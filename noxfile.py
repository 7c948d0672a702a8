"""Developer sessions: ``nox -s tests oldest lint typecheck bench coldstart cpu_levels validation paper
label_noise docs``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
PYTHON = ["3.11", "3.12"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The default test suite (what CI runs)."""
    session.install("-e", ".[all,test]", "scikit-learn")
    session.run("pytest", "-q", *session.posargs)


def _floors() -> list[str]:
    """Every requirement of the package, its boosters', plot, parquet, Dask and test extras and
    scikit-learn (which the tests train with) pinned at the oldest release pyproject.toml admits:
    ``name>=X`` -> ``name==X``."""
    project = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *extras["test"], *extras["labelnoise"]]
    for name in ("xgboost", "lightgbm", "catboost", "plot", "parquet", "dask"):
        wanted += extras[name]
    pins = [re.sub(r">=", "==", spec) for spec in wanted if not spec.startswith("cleanlab")]
    unpinned = [pin for pin in pins if "==" not in pin]
    if unpinned:
        raise ValueError(f"requirements without a >= floor: {unpinned}")
    return pins


@nox.session(python="3.11")
def oldest(session: nox.Session) -> None:
    """The test suite against the oldest release of every requirement pyproject.toml admits (the
    boosters' floors among them: influence_gbdt/adapters/versions.py) (~25 min on 2 cores)."""
    session.install(*_floors())
    session.install("--no-deps", "-e", ".")
    session.run("pytest", "-q", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", "influence_gbdt", "adapters", "tests", "benchmarks")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on the package."""
    session.install("-e", ".[all]", "mypy", "pandas-stubs")
    session.run("mypy", "influence_gbdt", "adapters")


@nox.session
def bench(session: nox.Session) -> None:
    """Timing tables: synthetic engine, the three libraries' defaults on Adult plus the 1e6-row case
    (issue 15), and CatBoost's get_object_importance side by side (writes docs/peers_scaling.png)."""
    session.install("-e", ".[all]", "scikit-learn")
    session.run("python", "benchmarks/engine.py")
    session.run("python", "benchmarks/speed.py", *session.posargs)
    session.run("python", "benchmarks/peers.py")


@nox.session
def coldstart(session: nox.Session) -> None:
    """First use in a fresh process with an empty kernel cache, with and without the precompiled
    kernels: installs the package as a wheel (which compiles them, ~1 min on 2 cores) (~3 min)."""
    session.install(".[all]")
    session.run("python", "benchmarks/coldstart.py", *session.posargs)


@nox.session
def cpu_levels(session: nox.Session) -> None:
    """The engine snapshot (every rule, pass and adapter's models) with the kernels compiled for
    generic x86-64, then compared bit for bit with them compiled for x86-64-v3, the level a wheel
    carries where its build machine has AVX2 (influence_gbdt/_cpu.py); needs such a machine
    (~10 min on 2 cores)."""
    session.install("-e", ".[all,test]", "scikit-learn")  # the snapshot reads the tests' configurations
    tmp = session.create_tmp()
    for action, cpu in (("save", "generic"), ("compare", "x86-64-v3")):
        env = {"NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": "", "NUMBA_CACHE_DIR": f"{tmp}/kernels-{cpu}"}
        session.run("python", "benchmarks/engine_snapshot.py", action, f"{tmp}/generic.npz", env=env)


@nox.session
def dice(session: nox.Session) -> None:
    """FeatureTweaking next to DiCE's random and genetic counterfactuals on Adult and breast cancer,
    each library's default classifier (dice-ml is installed here only) (~15 min at --rows 50)."""
    session.install("-e", ".[all]", "dice-ml", "scikit-learn")
    session.run("python", "benchmarks/dice_compare.py", *session.posargs)


@nox.session
def validation(session: nox.Session) -> None:
    """Studies against true retraining with each booster; writes docs/validation.md (~2 min)."""
    session.install("-e", ".[all]")
    session.run("python", "benchmarks/validation.py", *session.posargs)


@nox.session
def paper(session: nox.Session) -> None:
    """The paper's Table 2, Figures 1-2 and Table 3 on Adult; writes docs/paper.md (~1 hour on 2 cores)."""
    session.install("-e", ".[catboost,plot]")
    session.run("python", "benchmarks/paper.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (Sphinx, tutorials executed) into docs/_build/html; warnings are errors."""
    session.install("-e", ".[docs]")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html",
                *session.posargs)


@nox.session
def label_noise(session: nox.Session) -> None:
    """Flipped-label detectors on Adult (influence, self-influence, cleanlab); the docs' table (~10 min)."""
    session.install("-e", ".[catboost,plot,labelnoise]")
    session.run("python", "benchmarks/label_noise.py", "--out", "docs/label-noise-results.md",
                *session.posargs)
