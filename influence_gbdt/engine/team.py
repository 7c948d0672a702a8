"""A team of threads running one compiled sweep together. Private to the engine.

:func:`run` starts ``n`` threads that each call the same compiled kernel with their number
``tid`` (0 .. n - 1); the kernel splits the rows by ``tid`` and meets the others at
:func:`barrier` between the phases of each round. A round's phase lasts tens of microseconds or
more, so the barrier spins on an atomic counter instead of sleeping (as OpenMP's does). The
kernels release the GIL; no numba ``parallel=True`` layer is involved (see :mod:`.._jit`), so
several Python threads may run teams at the same time.

Rows are split in fixed chunks of :data:`CHUNK_ROWS`, a thread taking a contiguous run of them:
a sum over rows is summed chunk by chunk, each chunk in row order, then the chunks' sums in chunk
order, whatever the number of threads, so that the result does not depend on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numpy.typing import NDArray

from .. import _jit as numba

_internal = numba.njit(cache=True, nogil=True, internal=True)

#: Rows per chunk of a team's row split (and of its sums over rows: see the module docstring).
CHUNK_ROWS = 4096


def n_chunks(n: int) -> int:
    """Chunks of :data:`CHUNK_ROWS` rows that ``n`` rows make (at least one)."""
    return max(1, -(-n // CHUNK_ROWS))


def _item_pointer(context: Any, builder: Any, array_type: Any, array: Any, index: Any) -> Any:
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index])


def _fetch_add_typer(typingctx: Any, counter: Any, index: Any, value: Any) -> Any:
    """Atomically add ``value`` to ``counter[index]`` (int64) and return the value before."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _item_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return types.int64(counter, types.intp, types.int64), codegen


def _load_typer(typingctx: Any, counter: Any, index: Any) -> Any:
    """Atomically read ``counter[index]`` (int64)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _item_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "seq_cst", 8)

    return types.int64(counter, types.intp), codegen


_fetch_add: Any = intrinsic(_fetch_add_typer)
_load: Any = intrinsic(_load_typer)


@_internal
def barrier(bar: NDArray[np.int64], n_team: int) -> None:
    """Wait until all ``n_team`` threads have arrived. ``bar`` (2,) int64, zeros at the start of
    the team: the count of threads arrived, and the number of barriers passed. Everything a thread
    wrote before the barrier is visible to every thread after it."""
    if n_team == 1:
        return
    passed = _load(bar, 1)
    if _fetch_add(bar, 0, 1) == n_team - 1:  # the last to arrive opens it
        _fetch_add(bar, 0, -n_team)
        _fetch_add(bar, 1, 1)
    else:
        while _load(bar, 1) == passed:
            pass


@_internal
def own_rows(n: int, tid: int, n_team: int) -> tuple[int, int]:
    """Thread ``tid``'s rows ``j0 .. j1 - 1``: a contiguous run of whole chunks."""
    chunks = max(1, (n + CHUNK_ROWS - 1) // CHUNK_ROWS)
    return (min(n, tid * chunks // n_team * CHUNK_ROWS),
            min(n, (tid + 1) * chunks // n_team * CHUNK_ROWS))


def run(kernel: Callable[..., None], n_team: int, *args: Any, bar: NDArray[np.int64] | None = None) -> None:
    """``kernel(tid, n_team, bar, *args)`` on ``n_team`` threads (this one is thread 0); ``bar``: the
    team's barrier (2,) int64 zeros, made here unless given (a kernel that keeps it elsewhere)."""
    bar = np.zeros(2, dtype=np.int64) if bar is None else bar
    if n_team == 1:
        kernel(0, 1, bar, *args)
        return
    threads = [threading.Thread(target=kernel, args=(tid, n_team, bar, *args), daemon=True)
               for tid in range(1, n_team)]
    for thread in threads:
        thread.start()
    kernel(0, n_team, bar, *args)
    for thread in threads:
        thread.join()
