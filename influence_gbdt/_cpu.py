"""The CPU level a wheel's precompiled kernels are compiled for, and whether this machine runs them.

A wheel build (``setup.py``) compiles every kernel ahead of time (:mod:`influence_gbdt._warmup`);
numba compiles for one CPU, named as LLVM names CPUs (``NUMBA_CPU_NAME``). The build picks
:func:`build_cpu`: **x86-64-v3** (AVX2, FMA; every x86-64 processor since 2013-2015 but some
low-end ones) where the building machine has it, else **generic** (x86-64 or aarch64 without
extensions). The level matters for speed: the engine's batch loops run on float64 vectors, two
numbers an instruction on generic x86-64 (SSE2), four with AVX2 (measured: CatBoost's default on
Adult, 100 test points on two threads, 16.8 s with generic kernels, 11.3 s with x86-64-v3's); the
results are the same bits (numba fuses no multiply-add: ``fma`` is never used for ``a * b + c``).

An installed wheel's kernels are used only where this machine has every feature of their level
(:func:`missing`), otherwise they compile at first use as for any other mismatch (another numba
version). ``INFLUENCE_GBDT_KERNEL_CPU`` (one of :data:`LEVELS`) sets the level of a build, e.g.
``generic`` for a wheel meant for machines older than the one building it.
"""

from __future__ import annotations

import os
import platform

_V2 = ("cx16", "sahf", "popcnt", "sse3", "ssse3", "sse4.1", "sse4.2")
_V3 = (*_V2, "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")

#: The CPU levels a build may compile for, each with the features (LLVM's names, as
#: ``llvmlite.binding.get_host_cpu_features`` reports them) that a machine must have beyond its
#: triple's baseline: the x86-64 psABI's micro-architecture levels, as LLVM defines them (crc32,
#: which LLVM lists apart since version 14, comes with sse4.2 and is not asked for: an older
#: llvmlite does not report it).
LEVELS: dict[str, tuple[str, ...]] = {
    "generic": (),
    "x86-64-v2": _V2,
    "x86-64-v3": _V3,
    "x86-64-v4": (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}

#: The level a build picks on an x86-64 machine that has it (see the module docstring).
PREFERRED = "x86-64-v3"


def host_features() -> frozenset[str]:
    """The features this machine's CPU has, as numba compiles for it (``NUMBA_ENABLE_AVX=0``, which
    makes numba disregard AVX, removes the ``avx*`` features here too)."""
    from numba.core.codegen import get_host_cpu_features

    flags = get_host_cpu_features()  # "+sse2,-avx512f,..." (empty where LLVM cannot tell)
    return frozenset(flag[1:] for flag in flags.split(",") if flag.startswith("+"))


def missing(level: str, features: frozenset[str] | None = None) -> list[str]:
    """The features of ``level`` that a CPU with ``features`` (default: this machine's,
    :func:`host_features`) lacks: empty when it runs that level's code. A level not in
    :data:`LEVELS` lacks ``[level]`` itself (nothing is known of what its code needs)."""
    if level not in LEVELS:
        return [level]
    needed = LEVELS[level]
    if not needed:
        return []
    have = host_features() if features is None else features
    return [name for name in needed if name not in have]


def build_cpu() -> str:
    """The level a wheel build compiles the kernels for: ``INFLUENCE_GBDT_KERNEL_CPU`` if set, else
    :data:`PREFERRED` on an x86-64 machine that has it, else ``generic``. ValueError if the setting
    is not one of :data:`LEVELS` or names a level this machine cannot run (the build runs the
    kernels it compiles)."""
    chosen = os.environ.get("INFLUENCE_GBDT_KERNEL_CPU")
    if chosen:
        if chosen not in LEVELS:
            raise ValueError(f"INFLUENCE_GBDT_KERNEL_CPU={chosen!r} is not a CPU level the build knows; "
                             f"use one of {', '.join(LEVELS)}.")
        lacks = missing(chosen)
        if lacks:
            raise ValueError(f"INFLUENCE_GBDT_KERNEL_CPU={chosen!r}: this machine lacks {', '.join(lacks)} "
                             "and cannot run the kernels it would compile; build on a machine that has "
                             "them, or choose a lower level.")
        return chosen
    x86_64 = platform.machine().lower() in ("x86_64", "amd64")
    return PREFERRED if x86_64 and not missing(PREFERRED) else "generic"
