"""A team of threads running one compiled sweep together. Private to the engine.

:func:`run` has ``n`` threads each call the same compiled kernel with their number ``tid`` (0 ..
n - 1): the calling thread and ``n - 1`` helper threads, kept between teams (idle ones wait on a
semaphore, using no processor). The kernel splits the rows by ``tid`` and meets the others at
:func:`barrier` between the phases of each round. A round's phase lasts tens of microseconds or
more, so a thread waiting at the barrier does not go to sleep at once (as OpenMP's do not): it
spins on an atomic counter with the processor's spin-wait hint, then yields its core at each check,
then naps between checks (:data:`SPINS`, :data:`YIELDS`, :data:`NAP_US`). On an idle machine a
wait ends within the spinning. Where a machine runs more threads than it has cores (another
process, several teams at once), a waiting thread soon stops holding a core that the thread it
waits for needs: spinning alone made two threads 1.5-6x slower than one there. The kernels release
the GIL; no numba ``parallel=True`` layer is involved (see :mod:`.._jit`), so several Python
threads may run teams at the same time.

Rows are split in fixed chunks of :data:`CHUNK_ROWS`, a thread taking a contiguous run of them:
a sum over rows is summed chunk by chunk, each chunk in row order, then the chunks' sums in chunk
order, whatever the number of threads, so that the result does not depend on it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
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


def rows_team(threads: int, n: int) -> int:
    """The threads a pass over ``n`` rows takes: up to ``threads``, one per chunk of rows at most."""
    return max(1, min(int(threads), n_chunks(n)))


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

#: A waiting thread's checks of the barrier: the first :data:`SPINS` with the processor's spin-wait
#: hint between them (~25-40 us: a round's phase lasts tens of microseconds or more), the next
#: :data:`YIELDS` each after yielding its core (~0.7 ms on an idle core), the rest each after a
#: :data:`NAP_US` microseconds' sleep.
SPINS = 1024
YIELDS = 1024
NAP_US = 20


def _bind(symbol: str, function: Callable[[], Any]) -> bool:
    """Bind ``symbol`` for compiled code (and for cached code loaded later) to the C function
    ``function()`` returns; False where there is none."""
    try:
        address = ctypes.cast(function(), ctypes.c_void_p).value
    except (OSError, AttributeError):
        return False
    llvm.add_symbol(symbol, address)
    return True


if sys.platform == "win32":
    _YIELD = _bind("influence_gbdt_yield", lambda: ctypes.WinDLL("kernel32").SwitchToThread)  # type: ignore[attr-defined]
    _NAP = False  # Windows' Sleep counts whole milliseconds: a waiting thread only yields
else:
    _YIELD = _bind("influence_gbdt_yield", lambda: ctypes.CDLL(None).sched_yield)
    _NAP = _bind("influence_gbdt_nap", lambda: ctypes.CDLL(None).usleep)


def _call(builder: Any, name: str, returns: Any, *args: int) -> None:
    """Emit a call of the function ``name`` (an LLVM intrinsic or a symbol bound above) with the
    int32 constants ``args``; ``returns``: its LLVM result type."""
    i32 = ir.IntType(32)
    signature = ir.FunctionType(returns, [i32] * len(args))
    function = cgutils.get_or_insert_function(builder.module, signature, name)
    builder.call(function, [ir.Constant(i32, arg) for arg in args])


def _emit_relax(builder: Any) -> None:
    """The processor's spin-wait hint: ``pause`` on x86-64 (SSE2, in every x86-64), ``yield`` on
    aarch64, nothing elsewhere. It saves power and lets a sibling hyperthread run."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        _call(builder, "llvm.x86.sse2.pause", ir.VoidType())
    elif machine in ("aarch64", "arm64"):
        _call(builder, "llvm.aarch64.hint", ir.VoidType(), 1)


def _emit_yield(builder: Any) -> None:
    """Give this thread's core to another thread that is ready to run there, if any (a system call
    that returns at once on an idle core); without such a call, the spin-wait hint."""
    if _YIELD:
        _call(builder, "influence_gbdt_yield", ir.IntType(32))
    else:
        _emit_relax(builder)


def _emit_nap(builder: Any) -> None:
    """Sleep :data:`NAP_US` microseconds (``usleep``), leaving this core to any thread the system
    moves there; without ``usleep``, yield."""
    if _NAP:
        _call(builder, "influence_gbdt_nap", ir.IntType(32), NAP_US)
    else:
        _emit_yield(builder)


def _statement(emit: Callable[[Any], None]) -> Callable[..., Any]:
    """The code generator of a compiled statement of no arguments and no value: ``emit(builder)``."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        emit(builder)
        return context.get_dummy_value()

    return codegen


def _relax_typer(typingctx: Any) -> Any:
    return types.void(), _statement(_emit_relax)


def _yield_typer(typingctx: Any) -> Any:
    return types.void(), _statement(_emit_yield)


def _nap_typer(typingctx: Any) -> Any:
    return types.void(), _statement(_emit_nap)


_relax: Any = intrinsic(_relax_typer)
_yield: Any = intrinsic(_yield_typer)
_nap: Any = intrinsic(_nap_typer)


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
        checks = 0
        while _load(bar, 1) == passed:
            if checks < SPINS:
                _relax()
            elif checks < SPINS + YIELDS:
                _yield()
            else:
                _nap()
            checks += 1


@_internal
def take_items(queue: NDArray[np.int64], size: int) -> int:
    """The first of the next ``size`` items of the team's shared queue ``queue`` (1,) int64 (reset
    to 0 before the job is posted): each call, by any thread, gets its own run. Which thread takes
    which items depends on timing: only for work whose results do not (no sums across items)."""
    return int(_fetch_add(queue, 0, size))


@_internal
def own_rows(n: int, tid: int, n_team: int) -> tuple[int, int]:
    """Thread ``tid``'s rows ``j0 .. j1 - 1``: a contiguous run of whole chunks."""
    chunks = max(1, (n + CHUNK_ROWS - 1) // CHUNK_ROWS)
    return (min(n, tid * chunks // n_team * CHUNK_ROWS),
            min(n, (tid + 1) * chunks // n_team * CHUNK_ROWS))


class _Helper:
    """A thread kept for teams: it waits for a job, runs it and waits again (starting a thread per
    team cost ~0.2 ms per thread on a 16-core machine: 3 of the 36 ms of one test point's sweep)."""

    def __init__(self) -> None:
        self.go = threading.Semaphore(0)
        self.job: tuple[Callable[..., None], tuple[Any, ...], _Done] | None = None
        threading.Thread(target=self._serve, daemon=True, name="influence-gbdt-team").start()

    def _serve(self) -> None:
        while True:
            self.go.acquire()
            assert self.job is not None
            kernel, args, done = self.job
            self.job = None
            try:
                kernel(*args)
            except BaseException as exc:  # handed to the thread that started the team
                done.error = exc
            del kernel, args  # an idle helper must not keep the team's arrays alive
            with _lock:
                _idle.append(self)
            done.finished.release()
            del done


class _Done:
    """What a team's helpers report: one release of ``finished`` each, the first error if any."""

    def __init__(self) -> None:
        self.finished = threading.Semaphore(0)
        self.error: BaseException | None = None


_lock = threading.Lock()
_idle: list[_Helper] = []


def _forget_helpers() -> None:
    """In a forked child the helpers' threads do not exist: start afresh."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()


os.register_at_fork(after_in_child=_forget_helpers)


def run(kernel: Callable[..., None], n_team: int, *args: Any, bar: NDArray[np.int64] | None = None) -> None:
    """``kernel(tid, n_team, bar, *args)`` on ``n_team`` threads (this one is thread 0, the others
    kept from earlier teams where idle, else started); ``bar``: the team's barrier (2,) int64
    zeros, made here unless given (a kernel that keeps it elsewhere). Several teams may run at once
    (each takes its own helpers). An error raised by any member is raised here, once all are done."""
    bar = np.zeros(2, dtype=np.int64) if bar is None else bar
    if n_team == 1:
        kernel(0, 1, bar, *args)
        return
    with _lock:
        helpers = [_idle.pop() for _ in range(min(n_team - 1, len(_idle)))]
    helpers += [_Helper() for _ in range(n_team - 1 - len(helpers))]
    done = _Done()
    for tid, helper in enumerate(helpers, start=1):
        helper.job = (kernel, (tid, n_team, bar, *args), done)
        helper.go.release()
    kernel(0, n_team, bar, *args)  # if it raises, the helpers may wait at a barrier: not waited for
    for _ in helpers:
        done.finished.acquire()
    if done.error is not None:
        raise done.error
