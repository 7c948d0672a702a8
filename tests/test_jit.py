"""Compiled kernels: cached outside the package (or not at all), safe to call from several threads."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest

from influence_gbdt import _cpu, _jit, losses

ROOT = Path(__file__).resolve().parents[1]

# Imports the package, records where it caches, and compiles and runs one small kernel.
_PROBE = textwrap.dedent(
    """
    import numpy as np
    import influence_gbdt
    from influence_gbdt import _jit, losses
    print(_jit.CACHE_DIR)
    print(losses.Loss("logloss").values(np.zeros(3), np.zeros(3)).round(4).tolist())
    """
)


def _installed_copy(tmp_path: Path) -> Path:
    """The package laid out as pip installs it (adapters/ inside influence_gbdt/), under tmp_path."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "influence_gbdt", site / "influence_gbdt",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copytree(ROOT / "adapters", site / "influence_gbdt" / "adapters",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


def _files(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*")}


def _run(site: Path, env: dict[str, str], probe: str = _PROBE) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=site.parent,
        env={**base, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", **env},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")


def test_kernels_cache_in_numba_cache_dir_and_never_in_the_package(tmp_path: Path) -> None:
    site = _installed_copy(tmp_path)
    before = _files(site)
    cache = tmp_path / "numba-cache"
    lines = _run(site, {"NUMBA_CACHE_DIR": str(cache)})
    assert Path(lines[0]).parent == cache and lines[1] == "[0.6931, 0.6931, 0.6931]"
    assert any(p.suffix == ".nbi" for p in cache.rglob("*"))  # the cache is used ...
    assert _files(site) == before  # ... and nothing was written into the package
    # Another version of a module the kernels call gets its own cache: numba would check a cached
    # kernel against its own file only and keep running the old callee.
    losses = site / "influence_gbdt" / "losses.py"
    losses.write_text(losses.read_text() + "\n# changed\n")
    assert Path(_run(site, {"NUMBA_CACHE_DIR": str(cache)})[0]) != Path(lines[0])


def test_import_and_kernels_work_without_any_writable_cache_directory(tmp_path: Path) -> None:
    site = _installed_copy(tmp_path)
    if os.geteuid() != 0:  # root writes through permissions: there, "nothing written" is the proof
        for path in [site, *site.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    home = tmp_path / "home-is-a-file"  # neither it nor ~/.cache can be created, even by root
    home.write_text("")
    before = _files(site)
    try:
        lines = _run(site, {"HOME": str(home)})
        assert lines[0] == "None" and lines[1] == "[0.6931, 0.6931, 0.6931]"
        # The per-user default when HOME is usable: XDG_CACHE_HOME/influence-gbdt.
        lines = _run(site, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
        assert Path(lines[0]).parent == tmp_path / "xdg" / "influence-gbdt"
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert _files(site) == before


def test_stale_caches_of_other_versions_are_removed_from_our_own_directory_only(tmp_path: Path) -> None:
    site = _installed_copy(tmp_path)
    month_ago = time.time() - 31 * 86400

    def plant(parent: Path, name: str, old: bool) -> Path:
        sub = parent / name / "influence_gbdt_abc"
        sub.mkdir(parents=True)
        (sub / "kernel.nbi").write_text("")
        if old:
            for path in (sub / "kernel.nbi", sub, sub.parent):
                os.utime(path, (month_ago, month_ago))
        return sub.parent

    own = tmp_path / "xdg" / "influence-gbdt"
    stale, fresh, other = plant(own, "0123456789abcdef", True), plant(own, "fedcba9876543210", False), \
        plant(own, "notes", True)
    lines = _run(site, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert Path(lines[0]).parent == own
    assert not stale.exists() and fresh.exists() and other.exists()
    # $NUMBA_CACHE_DIR is shared with other projects: nothing in it is removed.
    shared = tmp_path / "numba"
    kept = plant(shared, "0123456789abcdef", True)
    _run(site, {"NUMBA_CACHE_DIR": str(shared)})
    assert kept.exists()


def test_one_explainer_scored_from_two_threads() -> None:
    # numba's workqueue layer (the one left where neither TBB nor OpenMP is available) aborts the
    # whole process on concurrent parallel kernels: run in a child, under that layer, to prove no
    # kernel uses it.
    code = textwrap.dedent(
        """
        import threading
        import numpy as np
        from boosters import binary_data, classifier
        from influence_gbdt import BoostingInfluence

        X, y, X_test, y_test = binary_data(n=300)
        ex = BoostingInfluence(classifier("lightgbm", X, y), progress=False).fit(X, y)
        expected = ex.score_training_points(X_test, y_test)
        results = []

        def work():
            for _ in range(10):
                results.append(ex.score_training_points(X_test, y_test))

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 20 and all(np.array_equal(r, expected) for r in results)
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "NUMBA_THREADING_LAYER": "workqueue"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


#: Saves 200 overloads of one kernel (keys ``f"{tag}{i}"``, each its own key as data) into the cache
#: directory argv[1] through the index class argv[2], as a process compiling into it does, once the
#: file argv[4] exists (after creating ``argv[4] + tag``: ready); gives up after 60 s without it (a
#: failed test leaves no process behind).
_SAVER = textwrap.dedent(
    """
    import os, sys, time
    from numba.core.caching import IndexDataCacheFile
    from influence_gbdt import _jit

    folder, index_class, tag, go = sys.argv[1:]
    index = getattr(_jit, index_class, IndexDataCacheFile)(folder, "kernel", ("stamp",))
    open(go + tag, "w").close()
    deadline = time.monotonic() + 60.0
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("no start signal")
    for i in range(200):
        index.save(f"{tag}{i}", f"{tag}{i}")
    """
)


@pytest.mark.skipif(not _jit.LOCKED_CACHE, reason="the cache's lock needs fcntl (POSIX)")
def test_processes_saving_one_kernels_overloads_at_once_keep_every_entry(tmp_path: Path) -> None:
    # numba's own save reads the index, picks the first unused data file name, then writes the index
    # and the data: processes saving at once lose entries and give two signatures one data file (the
    # build's warmup processes share one cache; so can Dask workers on one machine). Under the
    # cache's lock every entry holds its own data.
    def save_at_once(index_class: str, folder: Path) -> list[Any]:
        folder.mkdir()
        go = folder.parent / f"go-{index_class}"
        children = [subprocess.Popen([sys.executable, "-c", _SAVER, str(folder), index_class, tag, str(go)])
                    for tag in "abcd"]
        while not all(Path(f"{go}{tag}").exists() for tag in "abcd"):
            assert all(child.poll() is None for child in children)
            time.sleep(0.01)
        go.touch()  # all four save at once
        assert [child.wait() for child in children] == [0] * 4
        index = _jit._LockedIndex(str(folder), "kernel", ("stamp",))
        return [index.load(f"{tag}{i}") for tag in "abcd" for i in range(200)]

    expected = [f"{tag}{i}" for tag in "abcd" for i in range(200)]
    assert save_at_once("_LockedIndex", tmp_path / "locked") == expected
    # Without the lock, a part of these saves is lost or misfiled.
    assert save_at_once("IndexDataCacheFile", tmp_path / "unlocked") != expected


def test_a_binary_model_and_one_test_point_run_none_of_the_other_models_kernels() -> None:
    # What the first use of a binary model compiles where the wheel's kernels cannot be used (another
    # numba, an editable install): its replay without the multi-output code (scratch None), its one
    # test point without the batch's sweep nor, every step being cached, a loop reading margins (A
    # None). The kernels Python calls show which versions ran (benchmarks/coldstart.py:
    # LGBMClassifier() 34.0 -> 20.4 s with these choices).
    code = textwrap.dedent(
        """
        from boosters import binary_data, classifier
        from influence_gbdt import BoostingInfluence
        from influence_gbdt.engine import passes, reverse1

        X, y, X_test, y_test = binary_data(n=300)
        ex = BoostingInfluence(classifier("lightgbm", X, y), progress=False).fit(X, y)
        assert ex.engine_.cached_steps[0] == ex.engine_.cached_steps[1]
        ex.score_training_points(X_test[:1], y_test[:1])
        for kernel in (passes.replay, reverse1.sweep, reverse1.sweep_one):
            print(kernel.py_func.__name__, [str(sig[-1]) for sig in kernel.signatures])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:3] == ["replay ['none']", "sweep []", "sweep_one ['none']"]


# Records in ``compiled`` the module of each kernel the process compiles from here on.
_COUNTER = textwrap.dedent(
    """
    import numba.core.event as event
    compiled = []

    class Count(event.Listener):
        def on_start(self, e):
            compiled.append(e.data["dispatcher"].py_func.__module__)

        def on_end(self, e):
            pass

    event.register("numba:compile", Count())
    """
)
# Counts the package's kernels this process compiles while it runs the probe.
_COUNTING_PROBE = _COUNTER + _PROBE + "print(sum(m.startswith('influence_gbdt') for m in compiled))\n"


def _bare_env() -> dict[str, str]:
    """This process's environment without numba's and the package's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "INFLUENCE_GBDT_"))}


def _ship_losses(site: Path, cwd: Path, cpu: str | None) -> Path:
    """What a wheel build does (setup.py) on the package at ``site``, for one small piece of the
    workload (the losses' kernels), compiled for the CPU level ``cpu`` (None: the build's own
    choice); returns the package's ``_kernels`` directory."""
    shipped = site / "influence_gbdt" / "_kernels"
    env = _bare_env()
    if cpu is not None:
        env["INFLUENCE_GBDT_KERNEL_CPU"] = cpu
    command = [sys.executable, "-m", "influence_gbdt._warmup", "--ship", str(shipped), "--only", "losses"]
    subprocess.run(command, env={**env, "PYTHONPATH": str(site)}, cwd=cwd, check=True, capture_output=True)
    return shipped


def test_precompiled_kernels_are_read_relocated_read_only_and_compile_nothing(tmp_path: Path) -> None:
    # What a wheel build does (setup.py), on one small piece of the workload: compile for the
    # generic CPU in fresh caches and merge them into the package's _kernels directory.
    site = _installed_copy(tmp_path / "build")
    shipped = _ship_losses(site, tmp_path, "generic")
    (key,) = [p.name for p in shipped.iterdir()]
    assert json.loads((shipped / key / "manifest.json").read_text())["magic"][1:] == ["generic", ""]
    # Installed elsewhere (relocated) and read-only, with an empty cache that stays empty.
    site = site.rename(tmp_path / "elsewhere")
    for path in [site, *site.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    cache = tmp_path / "cache"
    try:
        lines = _run(site, {"NUMBA_CACHE_DIR": str(cache)}, _COUNTING_PROBE)
        assert lines[1] == "[0.6931, 0.6931, 0.6931]" and lines[2] == "0"  # nothing compiled
        assert not any(p.suffix == ".nbi" for p in cache.rglob("*"))  # nor cached
        # Ignored on request: the same kernels compile (into the cache).
        lines = _run(site, {"NUMBA_CACHE_DIR": str(cache),
                             "INFLUENCE_GBDT_PRECOMPILED": "0"}, _COUNTING_PROBE)
        assert lines[1] == "[0.6931, 0.6931, 0.6931]" and int(lines[2]) > 0
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    # Other sources (an edited module: another digest) never run the shipped kernels.
    losses = site / "influence_gbdt" / "losses.py"
    losses.write_text(losses.read_text() + "\n# changed\n")
    lines = _run(site, {"NUMBA_CACHE_DIR": str(tmp_path / "cache2")}, _COUNTING_PROBE)
    assert int(lines[2]) > 0


#: Whether this machine runs x86-64-v3 code (an x86-64 CPU with AVX2, as numba sees it).
_RUNS_V3 = platform.machine().lower() in ("x86_64", "amd64") and not _cpu.missing("x86-64-v3")


def test_cpu_levels_name_the_features_a_machine_needs() -> None:
    v2 = frozenset(_cpu.LEVELS["x86-64-v2"])
    assert _cpu.missing("generic", frozenset()) == []
    assert _cpu.missing("x86-64-v3", v2) == ["avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe",
                                             "xsave"]
    assert _cpu.missing("x86-64-v3", frozenset(_cpu.LEVELS["x86-64-v4"])) == []
    assert _cpu.missing("znver4", frozenset(_cpu.LEVELS["x86-64-v4"])) == ["znver4"]  # not a level


def test_the_builds_cpu_level_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLUENCE_GBDT_KERNEL_CPU", "haswell")
    with pytest.raises(ValueError, match="not a CPU level the build knows; use one of generic, x86-64-v2"):
        _cpu.build_cpu()
    monkeypatch.setenv("INFLUENCE_GBDT_KERNEL_CPU", "generic")
    assert _cpu.build_cpu() == "generic"
    monkeypatch.delenv("INFLUENCE_GBDT_KERNEL_CPU")
    assert _cpu.build_cpu() == ("x86-64-v3" if _RUNS_V3 else "generic")


@pytest.mark.skipif(not _RUNS_V3, reason="the x86-64-v3 kernels can only be built and run with AVX2")
def test_precompiled_kernels_of_a_cpu_level_run_only_where_the_cpu_has_its_features(tmp_path: Path) -> None:
    # The build's own choice on this machine: x86-64-v3, recorded in the manifest.
    site = _installed_copy(tmp_path / "build")
    shipped = _ship_losses(site, tmp_path, None)
    (key,) = [p.name for p in shipped.iterdir()]
    assert json.loads((shipped / key / "manifest.json").read_text())["magic"][1:] == ["x86-64-v3", ""]
    env = _bare_env()
    env.update(PYTHONPATH=str(site), NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def probe(**extra: str) -> tuple[list[str], str]:
        out = subprocess.run([sys.executable, "-c", _COUNTING_PROBE], capture_output=True, text=True,
                             cwd=tmp_path, env={**env, **extra})
        assert out.returncode == 0, out.stderr
        return out.stdout.split("\n"), out.stderr

    lines, said = probe()
    assert lines[1] == "[0.6931, 0.6931, 0.6931]" and lines[2] == "0" and said == ""
    # A CPU without AVX (as numba sees one with NUMBA_ENABLE_AVX=0) never runs them: they compile,
    # and the one line on stderr says why.
    lines, said = probe(NUMBA_ENABLE_AVX="0")
    assert lines[1] == "[0.6931, 0.6931, 0.6931]" and int(lines[2]) > 0
    assert "precompiled kernels are for x86-64-v3 CPUs, and this one lacks avx, avx2" in said


# Scores of a LightGBM and a CatBoost model (several leaf steps a round) for 16 test points,
# hashed: the reverse sweep's batch loops, which run on vectors as wide as the CPU level allows.
# (Every pass and rule under both levels: ``nox -s cpu_levels``, the engine snapshot.)
_SCORES_PROBE = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from boosters import binary_data, classifier
    from influence_gbdt import BoostingInfluence

    X, y, X_test, y_test = binary_data(n=300)
    digest = hashlib.sha256()
    for library in ("lightgbm", "catboost"):
        ex = BoostingInfluence(classifier(library, X, y), progress=False).fit(X, y)
        digest.update(np.ascontiguousarray(ex.score_training_points(X_test[:16], y_test[:16])).tobytes())
    print(digest.hexdigest())
    """
)


@pytest.mark.skipif(not _RUNS_V3, reason="x86-64-v3 code runs only on a machine with AVX2")
def test_kernels_compiled_for_generic_and_x86_64_v3_cpus_give_the_same_bits(tmp_path: Path) -> None:
    # numba fuses no multiply-add: the wider vectors of x86-64-v3 compute the same roundings.
    env = _bare_env()
    env.update(PYTHONPATH=str(ROOT / "tests"), INFLUENCE_GBDT_PRECOMPILED="0", INFLUENCE_GBDT_QUIET="1",
               NUMBA_CPU_FEATURES="")
    digests = []
    for cpu in ("generic", "x86-64-v3"):
        out = subprocess.run([sys.executable, "-c", _SCORES_PROBE], capture_output=True, text=True,
                             env={**env, "NUMBA_CPU_NAME": cpu, "NUMBA_CACHE_DIR": str(tmp_path / cpu)})
        assert out.returncode == 0, out.stderr[-2000:]
        digests.append(out.stdout.strip())
    assert digests[0] == digests[1]


def test_a_kernel_for_kernels_only_refuses_a_call_from_python() -> None:
    # Compiled without a Python wrapper (internal=True), numba's dispatcher would jump to a null
    # function pointer and crash the process; it must raise instead, before and after a kernel
    # has compiled it.
    z = np.empty(2)
    with pytest.raises(TypeError, match="compiled for the package's other kernels only"):
        losses.point(losses.LOGLOSS, np.array([1e-16, 1.0]), np.zeros(1), z)
    losses.Loss("logloss").values(np.zeros(3), np.zeros(3))  # a kernel calls point
    with pytest.raises(TypeError, match="cannot be called from Python"):
        losses.point(losses.LOGLOSS, np.array([1e-16, 1.0]), np.zeros(1), z)


def _c_library_exp() -> Any:
    """The C library's own ``exp`` through ctypes (its default version), or None."""
    name = ctypes.util.find_library("m") or ("libm.so.6" if sys.platform.startswith("linux") else None)
    if name is None:
        return None
    fn = ctypes.CDLL(name).exp
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return fn


@numba.njit  # numba's own decorator: the binding is numba's, for every kernel of the process
def _exp_all(x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i])


def test_the_kernels_exp_is_the_c_librarys_bit_for_bit() -> None:
    # Whichever exp the kernels are bound to (_jit.FAST_EXP), it must return the C library's
    # values exactly: random arguments over exp's whole range, its edges and special values.
    c_exp = _c_library_exp()
    if c_exp is None:
        pytest.skip("no C math library to compare with")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=20_000) * 30.0, rng.uniform(-760.0, 720.0, 20_000),
                        rng.normal(size=2_000) * 1e-10, np.array(_jit._EXP_PROBES)])
    out = np.empty_like(x)
    _exp_all(x, out)
    expected = np.array([c_exp(float(v)) for v in x])
    assert np.array_equal(out.view(np.uint64), expected.view(np.uint64))
    if platform.libc_ver()[0] == "glibc" and os.environ.get("INFLUENCE_GBDT_FAST_EXP") != "0":
        assert _jit.FAST_EXP  # glibc 2.15 on has __exp_finite: the faster binding is taken


def test_scores_do_not_depend_on_which_exp_the_kernels_call() -> None:
    # The same LightGBM model scored by LeafInfluence and LeafRefit in two processes, one with
    # the kernels' exp bound to glibc's __exp_finite (the default where it exists), one with
    # numba's own binding: every score the same, bit for bit.
    code = textwrap.dedent(
        """
        import hashlib
        import numpy as np
        from boosters import binary_data, classifier
        from influence_gbdt import BoostingInfluence, _jit

        X, y, X_test, y_test = binary_data(n=400)
        model = classifier("lightgbm", X, y)
        scores = [BoostingInfluence(model, method=m, progress=False).fit(X, y)
                  .score_training_points(X_test[:5], y_test[:5]) for m in ("leaf_influence", "leaf_refit")]
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(s).tobytes() for s in scores))
        print(_jit.FAST_EXP, digest.hexdigest())
        """
    )
    outputs = []
    for fast in ("1", "0"):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "INFLUENCE_GBDT_FAST_EXP": fast}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        outputs.append(out.stdout.split())
    assert outputs[1][0] == "False"
    assert outputs[0][1] == outputs[1][1]



# Counts the kernels compiled within the command line's --quiet, then compiles one outside it.
_SILENCED_PROBE = _COUNTER + textwrap.dedent(
    """
    import sys
    import numpy as np
    from influence_gbdt import _jit, losses
    with _jit.no_compile_notice():
        losses.Loss("logloss").values(np.zeros(3), np.zeros(3))
    print(sum(m.startswith("influence_gbdt") for m in compiled))
    print("-- block left --", file=sys.stderr, flush=True)
    losses.Loss("logloss").grad_hess(np.zeros((3, 1)), np.zeros((3, 1)))
    """
)


def test_no_compile_notice_silences_the_notice_within_its_block_only(tmp_path: Path) -> None:
    """Kernels compiled within ``no_compile_notice`` (the command line's ``--quiet``) say nothing
    on stderr; the next compile outside it says the one line."""
    env = {**_bare_env(), "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "INFLUENCE_GBDT_PRECOMPILED": "0"}
    out = subprocess.run([sys.executable, "-c", _SILENCED_PROBE], capture_output=True, text=True,
                         cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split("\n")[0]) > 0  # kernels compiled within the block
    before, after = out.stderr.split("-- block left --")
    assert before == "" and after.count("influence-gbdt: compiling its kernels") == 1


@pytest.mark.calls_kernels  # kernels of its own, made with the package's njit
def test_distinct_arrays_reach_the_compiled_code_as_noalias_arguments() -> None:
    # distinct=True promises the compiler that no two array arguments share memory, so that the
    # batch's loops vectorize without checking at run time that they do not: the promise must be
    # in the compiled code (only there, and on every pointer argument), and refused for a kernel
    # Python could call with any arrays.
    def add_into(a: np.ndarray, b: np.ndarray) -> None:
        for i in range(a.shape[0]):
            a[i] += b[i]

    plain = _jit.njit(internal=True)(add_into)
    distinct = _jit.njit(internal=True, distinct=True)(add_into)

    @_jit.njit
    def call_both(a: np.ndarray, b: np.ndarray) -> None:
        plain(a, b)
        distinct(a, b)

    a = np.zeros(8)
    call_both(a, np.arange(8.0))
    np.testing.assert_array_equal(a, 2 * np.arange(8.0))

    def pointer_arguments(kernel: Any) -> tuple[int, int]:
        """(pointer arguments marked noalias, all pointer arguments) of the array arguments."""
        (compiled,) = kernel.overloads.values()
        ir = compiled.library.get_llvm_str()
        header = next(line for line in ir.splitlines() if line.startswith("define") and "add_into" in line)
        args = [arg for arg in header[header.index("(") + 1 :].split(", ")
                if "%arg." in arg.replace('"', "") and (arg.startswith("ptr") or "*" in arg.split()[0])]
        return sum("noalias" in arg for arg in args), len(args)

    assert pointer_arguments(plain)[0] == 0
    marked, every = pointer_arguments(distinct)
    assert marked == every >= 4  # two arrays' data and reference-count pointers at least (opaque
    # pointers, LLVM 15 on: `ptr noalias ... %arg.a.4`; typed: `double* noalias ... %"arg.a.4"`)
    with pytest.raises(ValueError, match="internal kernels"):
        _jit.njit(distinct=True)(add_into)
