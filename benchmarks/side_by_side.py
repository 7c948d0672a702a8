"""Run a benchmark script against two versions of the package in one run, alternating.

Speed claims compare before and after on the same machine in the same run, never across runs:

    git worktree add ../before <commit>
    python benchmarks/side_by_side.py --before ../before --repeat 3 -- benchmarks/engine.py --n 32561

runs ``benchmarks/engine.py`` (from this checkout, with the arguments after ``--``) ``repeat`` times
against the ``--before`` checkout's ``influence_gbdt`` and ``repeat`` times against this one,
alternating (before, after, before, ...), each version with its own numba cache (compiled in a
first, untimed run), and prints every run's table, then for each line of the tables that holds a
number the best of each version and the ratio after / before. Each version runs a copy of its
checkout's ``influence_gbdt`` package with the checkout's ``adapters`` inside it, where an
installed wheel puts them (``PYTHONPATH``; an editable install would otherwise supply its own
``influence_gbdt.adapters`` to both versions); everything else (the boosters) comes from the
running environment.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_NUMBER = re.compile(r"^\|([^|]+)\|(?:[^|]*\|)*?\s*([0-9.]+(?:e[-+]?\d+)?)\s*\|")


def _run(tree: Path, cache: str, script: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, *script], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(script)} failed against {tree}:\n{done.stderr[-3000:]}")
    return done.stdout


def _package_copy(tree: Path, into: Path) -> Path:
    """A copy of ``tree``'s ``influence_gbdt`` package in ``into``, with ``tree/adapters`` as its
    ``adapters`` sub-package; returns ``into`` (for ``PYTHONPATH``)."""
    skip = shutil.ignore_patterns("__pycache__", "_kernels")
    package = into / "influence_gbdt"
    shutil.copytree(tree / "influence_gbdt", package, ignore=skip)
    if (tree / "adapters").is_dir() and not (package / "adapters").exists():
        shutil.copytree(tree / "adapters", package / "adapters", ignore=skip)
    return into


def _numbers(table: str) -> dict[str, float]:
    """The first number of each Markdown table line, by the line's first cell."""
    out = {}
    for line in table.splitlines():
        match = _NUMBER.match(line.strip())
        if match:
            out[match.group(1).strip()] = float(match.group(2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the version to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- benchmark script and its arguments")
    args = parser.parse_args()
    script = [a for a in args.script if a != "--"] or ["benchmarks/engine.py"]
    best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as caches:
        versions = {name: _package_copy(tree, Path(caches, "package", name))
                    for name, tree in (("before", args.before.resolve()), ("after", ROOT))}
        for name, tree in versions.items():  # compile each version's kernels, untimed
            _run(tree, os.path.join(caches, name), script)
        for i in range(args.repeat):
            for name, tree in versions.items():
                table = _run(tree, os.path.join(caches, name), script)
                print(f"## {name}, run {i + 1}\n\n{table}")
                for key, value in _numbers(table).items():
                    best[name][key] = min(value, best[name].get(key, float("inf")))
    print("| line | before (best) | after (best) | after / before |\n|---|---|---|---|")
    for key, before in best["before"].items():
        after = best["after"].get(key)
        if after is not None:
            ratio = f"{after / before:.3f}" if before > 0 else "-"
            print(f"| {key} | {before:.4g} | {after:.4g} | {ratio} |")


if __name__ == "__main__":
    main()
