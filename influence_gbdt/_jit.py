"""numba as the kernels use it: where compiled code comes from and is cached.

The kernel modules import this module *as* ``numba`` (``from . import _jit as numba``), so their
decorators read as plain numba (``@numba.njit(cache=True, nogil=True)``) while a few things are
decided here, once.

**Precompiled kernels.** A wheel built from the sources (``pip install .``, ``python -m build``)
carries its kernels already compiled, for a CPU level most machines have (x86-64-v3, i.e. AVX2,
where the building machine has it, else generic x86-64 or aarch64: :mod:`influence_gbdt._cpu`), in
``influence_gbdt/_kernels/<key>/`` (see :mod:`influence_gbdt._warmup`, which the build runs). They
are read first, and used only where the key matches this process exactly (numba's version,
Python's version and a digest of the package's sources) and this machine has every feature of
that CPU level (:data:`SHIPPED_DIR`; None otherwise, the compile notice says why). A kernel found
there is not compiled at all. ``INFLUENCE_GBDT_PRECOMPILED=0`` ignores them (what
``benchmarks/coldstart.py`` measures the fallback with).

**Cache location.** What is compiled at run time (another numba or Python version, an editable
install, a signature the precompiled set lacks) is cached, never in the installed package (files
pip did not install stay behind after ``pip uninstall``, and a leftover
``influence_gbdt/__pycache__`` turns the package into an empty namespace package for the next
install), but in

1. ``$NUMBA_CACHE_DIR`` if set (numba's own setting; if it is not writable, nothing is cached),
2. else ``$XDG_CACHE_HOME/influence-gbdt``, or ``~/.cache/influence-gbdt`` without XDG_CACHE_HOME,
3. else (no writable directory, e.g. a read-only HOME) nowhere: the kernels compile in memory at
   first use in each process, and nothing is written.

:data:`CACHE_DIR` holds the choice made at import: a subdirectory named by a digest of the
*contents* of the package's sources (:func:`source_digest`), so that the same code compiles once
whatever installed it (a reinstall, an editable install, another virtual environment); in our own
directory (not in ``$NUMBA_CACHE_DIR``) the other versions' subdirectories that nothing has written
to for :data:`STALE_DAYS` days are removed then. Every cached kernel is stamped with that digest
too, not with its file's modification time as numba's own cache does: a kernel that calls a
function of another module (every kernel calls the losses) must not keep running an old callee.

**Compiling is announced.** The first time a process compiles one of the package's kernels it
says so in one line on stderr (what, why, about how long); ``INFLUENCE_GBDT_QUIET=1`` silences it, and
so does :func:`no_compile_notice` (the command line's ``--quiet``).

**The exponential.** numba binds the kernels' ``exp`` to its own helper, which calls the C
library's. On Linux that helper was linked against glibc's oldest ``exp``, a wrapper that checks
for SVID error handling around the computation (``__ieee754_exp``). Where glibc also offers the
computation without a wrapper (``__exp_finite``, since glibc 2.15) and it returns the same bits
as numba's ``exp`` on :data:`_EXP_PROBES`, the kernels' ``exp`` is bound to it instead
(:data:`FAST_EXP`): the same results, about 1.7x faster per call (measured: 6.1-6.3 -> 3.6-3.7 ns),
and the exponential is a fifth to a quarter of CatBoost's and LeafRefit's time. The binding is
numba's, for the whole process: other numba code gets the same ``exp`` values faster, and no
``errno`` on overflow (numba code cannot read it). ``INFLUENCE_GBDT_FAST_EXP=0`` keeps numba's.

No kernel uses numba's ``parallel=True`` layer (whose ``workqueue`` backend aborts the process when
two Python threads enter parallel code at once): kernels release the GIL and the engine runs them
on its own threads, so several threads may score at the same time.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numba as _numba
from llvmlite import binding as _llvm
from numba.core import caching as _caching
from numba.core import compiler as _compiler
from numba.core import event as _event
from numba.core import types as _types
from numba.core.registry import cpu_target as _cpu_target

try:
    import fcntl as _fcntl
except ImportError:  # Windows: numba's own cache files, unlocked
    _fcntl = None  # type: ignore[assignment]

#: Whether the kernel cache's entries are read and written under a lock (:class:`_LockedIndex`),
#: so that processes can compile into one cache at once.
LOCKED_CACHE: bool = _fcntl is not None


def _writable_dir(path: str) -> bool:
    """Whether ``path`` is (or can be made) a directory we can create files in."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def cache_dir() -> str | None:
    """The directory compiled kernels are cached in, or None when nothing is writable.

    ``$NUMBA_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/influence-gbdt`` or
    ``~/.cache/influence-gbdt``, each followed by ``/<source_digest()>``; None if that directory
    cannot be written.
    """
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    own = not chosen
    if not chosen:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        if base.startswith("~"):  # no home directory to expand to
            return None
        chosen = os.path.join(base, "influence-gbdt")
    parent = os.path.abspath(chosen)
    chosen = os.path.join(parent, DIGEST)
    if not _writable_dir(chosen):
        return None
    if own:  # never in $NUMBA_CACHE_DIR, which other projects share
        _prune(parent, keep=chosen)
    return chosen


#: A version's cache unused this long is removed (each install or edit makes a new one).
STALE_DAYS = 30


def _prune(parent: str, keep: str) -> None:
    """Remove the other versions' cache directories in ``parent`` that nothing has written to for
    :data:`STALE_DAYS` days (the newest modification time of their entries). Best effort: a cache
    removed under a process still using it only makes that process compile again."""
    limit = time.time() - STALE_DAYS * 86400
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if entry.path == keep or not _DIGEST.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            newest = max((f.stat().st_mtime for f in os.scandir(entry.path)), default=entry.stat().st_mtime)
        except OSError:
            continue
        if newest < limit:
            shutil.rmtree(entry.path, ignore_errors=True)


_DIGEST = re.compile(r"[0-9a-f]{16}")


def source_digest() -> str:
    """16 hex digits naming this version of the package's Python sources: the names and *contents*
    of every ``.py`` file of ``influence_gbdt`` and of its ``adapters`` sub-package, wherever that
    lies (inside the package when installed, beside it in an editable install); about 2 ms. The
    same code gives the same digest wherever it is installed (a reinstall, an editable install,
    another virtual environment), so its kernels are compiled once."""
    root = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.find_spec("influence_gbdt.adapters")
    adapters = (os.path.dirname(os.path.abspath(spec.origin)) if spec is not None and spec.origin
                else os.path.join(root, "adapters"))
    files = []
    for top, prefix in ((root, ""), (adapters, "adapters")):
        for folder, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__" and os.path.join(folder, d) != adapters]
            paths = [os.path.join(folder, f) for f in names if f.endswith(".py")]
            files += [(os.path.join(prefix, os.path.relpath(path, top)), path) for path in paths]
    digest = hashlib.sha256()
    for name, path in sorted(files):
        with open(path, "rb") as fh:
            content = fh.read()
        digest.update(f"{name}:{len(content)};".encode())
        digest.update(content)
    return digest.hexdigest()[:16]


#: The digest of the package's sources (:func:`source_digest`), computed once at import.
DIGEST: str = source_digest()
#: Where this process caches the kernels it compiles (None: in memory only).
CACHE_DIR: str | None = cache_dir()
#: Where a built wheel keeps its precompiled kernels (see the module docstring).
SHIPPED_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernels")


def shipped_key() -> str:
    """The name of the precompiled kernels' directory this process can use: numba's version,
    Python's version and the sources' digest (``0.68.1-py311-<digest>``)."""
    return f"{_numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{DIGEST}"


def _shipped_dir() -> tuple[str | None, tuple[Any, ...] | None, str]:
    """(the precompiled kernels' directory, the codegen magic tuple they were compiled for, "") or
    (None, None, why this process cannot use any): another numba, Python or source version, another
    machine triple, a CPU level whose features this machine lacks (:func:`._cpu.missing`), or
    ``INFLUENCE_GBDT_PRECOMPILED=0`` (to measure or rule out the precompiled kernels)."""
    if os.environ.get("INFLUENCE_GBDT_PRECOMPILED") == "0":
        return None, None, "INFLUENCE_GBDT_PRECOMPILED=0 is set"
    path = os.path.join(SHIPPED_ROOT, shipped_key())
    try:
        with open(os.path.join(path, "manifest.json")) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        return None, None, (f"this install has no precompiled kernels for numba {_numba.__version__} / "
                            f"Python {sys.version_info[0]}.{sys.version_info[1]}")
    from numba.core.registry import cpu_target

    from ._cpu import missing

    triple = cpu_target.target_context.codegen().magic_tuple()[0]
    magic = tuple(manifest.get("magic") or ())
    if len(magic) != 3 or magic[0] != triple:
        other = magic[0] if magic else "an unrecorded one"
        return None, None, f"this install's precompiled kernels are for another machine ({other})"
    lacks = missing(magic[1])
    if lacks:
        return None, None, (f"this install's precompiled kernels are for {magic[1]} CPUs, and this one "
                            f"lacks {', '.join(lacks)}")
    return path, magic, ""


#: The precompiled kernels this process reads (None: none), the codegen magic tuple (triple, CPU
#: level, features) they were compiled for, and why there are none ("" when there are).
SHIPPED_DIR, SHIPPED_MAGIC, NOT_SHIPPED = _shipped_dir()


#: Where :func:`_bind_exp` checks that the two exponentials agree bit for bit: zeros, tiny and huge
#: arguments (overflow to inf, underflow to subnormals and 0), infinities, NaN, and a grid.
_EXP_PROBES = (0.0, -0.0, 1.0, -1.0, 2.0**-54, -(2.0**-54), 2.0**-60, 1e-300, -1e-300, 0.5, 709.78,
               709.79, -708.4, -745.13, -745.14, 1e4, -1e4, math.inf, -math.inf, math.nan,
               *(k * 0.731 - 37.0 for k in range(101)))


def _bind_exp() -> bool:
    """Bind the kernels' ``exp`` to glibc's ``__exp_finite`` where it returns what numba's ``exp``
    returns on every probe, bit for bit; return whether it did (see the module docstring)."""
    if not sys.platform.startswith("linux") or os.environ.get("INFLUENCE_GBDT_FAST_EXP") == "0":
        return False
    try:
        libm = ctypes.CDLL("libm.so.6")
        dlvsym = ctypes.CDLL(None).dlvsym  # glibc's; absent from other C libraries
    except (OSError, AttributeError):
        return False
    dlvsym.restype = ctypes.c_void_p
    dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    fast = dlvsym(libm._handle, b"__exp_finite", b"GLIBC_2.15")
    _cpu_target.target_context  # noqa: B018 -- numba binds its math functions when it sets up
    current = _llvm.address_of_symbol("exp")
    if not fast or not current:
        return False
    call = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)
    fast_exp, numba_exp = call(fast), call(current)
    if any(struct.pack("<d", fast_exp(x)) != struct.pack("<d", numba_exp(x)) for x in _EXP_PROBES):
        return False
    _llvm.add_symbol("exp", fast)
    return True


#: Whether the kernels' ``exp`` is glibc's ``__exp_finite`` (see the module docstring).
FAST_EXP: bool = _bind_exp()


class _Locator(_caching._CacheLocator):
    """:data:`CACHE_DIR`, every kernel stamped with the sources' digest (not its file's mtime)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._py_file = py_file  # numba names it in its warning about an uncachable kernel

    def get_cache_path(self) -> str:
        return CACHE_DIR or ""

    def get_source_stamp(self) -> Any:
        return ("influence-gbdt", DIGEST)

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> _Locator:
        return cls(py_func, py_file)


class _Impl(_caching.CompileResultCacheImpl):
    _locator_classes = [_Locator]  # noqa: RUF012 (numba's base class declares it a list)


class _LockedIndex(_caching.IndexDataCacheFile):
    """numba's index and data files of one kernel, read and written under an exclusive lock of
    the cache directory (its ``.lock`` file).

    numba's own save reads the index, picks the first data file name the index does not use, and
    writes the index and then the data. Two processes saving overloads of one kernel into one cache
    at once (the build's two warmup processes, which share a cache; Dask workers or test processes
    on one machine) can pick the same name, and the index then names another signature's code.
    Under the lock a save and a load see whole entries, and a process that reaches a signature
    after another saved it reads it instead of compiling it again."""

    def save(self, key: Any, data: Any) -> None:
        with self._locked():
            super().save(key, data)

    def load(self, key: Any) -> Any:
        with self._locked():
            return super().load(key)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock of the cache directory (unlocked, as numba is, where its lock file cannot
        be opened)."""
        try:
            fh = open(os.path.join(self._cache_path, ".lock"), "a")
        except OSError:
            yield
            return
        with fh:  # closing the file releases the lock
            _fcntl.flock(fh, _fcntl.LOCK_EX)
            yield


class KernelCache(_caching.FunctionCache):
    """numba's function cache with the precompiled kernels read first (under the key of the CPU
    level they were compiled for, which :func:`_shipped_dir` checked this machine runs) and
    :data:`CACHE_DIR` (when there is one) for what this process compiles, its entries read and
    written under a lock of that directory (:class:`_LockedIndex`; POSIX only)."""

    _impl_class = _Impl

    def __init__(self, py_func: Any) -> None:
        super().__init__(py_func)
        if LOCKED_CACHE:
            self._cache_file = _LockedIndex(cache_path=self._cache_path,
                                            filename_base=self._impl.filename_base,
                                            source_stamp=self._impl.locator.get_source_stamp())
        self._shipped = None if SHIPPED_DIR is None else _caching.IndexDataCacheFile(
            cache_path=SHIPPED_DIR, filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp())
        if CACHE_DIR is None:
            self.disable()

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if self._shipped is not None:
            target_context.refresh()
            key = self._index_key(sig, target_context.codegen())
            data = self._shipped.load((key[0], SHIPPED_MAGIC, key[2]))
            if data is not None:
                return self._impl.rebuild(target_context, data)
        return super().load_overload(sig, target_context)


class _DistinctArguments(_compiler.Compiler):
    """numba's compiler, the function's pointer arguments marked ``noalias`` (:func:`njit`'s
    ``distinct``)."""

    def __init__(self, typingctx: Any, targetctx: Any, library: Any, args: Any, return_type: Any,
                 flags: Any, locals: Any) -> None:
        flags.noalias = True
        super().__init__(typingctx, targetctx, library, args, return_type, flags, locals)


#: Every kernel :func:`njit` made, in the order their modules defined them (the test suite checks
#: that it compiles no signature of these that the precompiled set lacks).
KERNELS: list[Any] = []


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` whose ``cache=True`` means :class:`KernelCache`: the precompiled kernels, then
    :data:`CACHE_DIR`; used as ``@njit``, ``@njit(...)`` or ``njit(...)(func)``.

    ``internal=True`` marks a function only compiled code calls: numba then builds no Python (nor C)
    wrapper for it, which a function taking the state's groups costs compile time for (unboxing
    every array of every group), and Python cannot call it (it raises TypeError; numba's own
    dispatcher would jump to the missing wrapper and crash the process).

    ``distinct=True`` (with ``internal``) compiles the function's pointer arguments as not
    aliased (LLVM's ``noalias``, numba's ``Flags.noalias``, which numba sets only for its own
    parallel loops): the compiler then vectorizes a loop over arrays it writes without checking at
    run time that they do not overlap. The callers' contract: **no two array arguments are views
    of one array** (not even of disjoint parts: they would share the reference count, and their
    memory would be reachable through both), so pass a matrix whole with the indices of its rows,
    not two rows of it. Arguments that are not arrays (numbers, tuples of numbers) are free."""
    if args and callable(args[0]):
        return njit(**options)(args[0])
    cache = bool(options.pop("cache", False))
    internal = bool(options.pop("internal", False))
    if options.pop("distinct", False):
        if not internal:
            raise ValueError("distinct=True is for internal kernels: Python passes whatever arrays it has")
        options.update(pipeline_class=_DistinctArguments)
    if internal:
        options.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)

    def decorate(func: Callable[..., Any]) -> Any:
        dispatcher = _numba.njit(**options)(func)
        if cache and (CACHE_DIR is not None or SHIPPED_DIR is not None):
            dispatcher._cache = KernelCache(dispatcher.py_func)
        if internal:
            _refuse_python_calls(dispatcher)
        _compile_unliteral(dispatcher)
        KERNELS.append(dispatcher)
        return dispatcher

    return decorate


class _CompileNotice(_event.Listener):
    """Says once per process, on stderr, that the package's kernels are being compiled and why
    (unless ``INFLUENCE_GBDT_QUIET`` is set, or within :func:`no_compile_notice`)."""

    def __init__(self) -> None:
        self.said = False
        self.silenced = 0

    def on_start(self, event: Any) -> None:
        dispatcher = event.data.get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        if (self.said or self.silenced or not module.startswith("influence_gbdt")
                or os.environ.get("INFLUENCE_GBDT_QUIET")):
            return
        self.said = True
        why = NOT_SHIPPED if SHIPPED_DIR is None else "a kernel signature the precompiled set lacks"
        where = f"cached in {CACHE_DIR}" if CACHE_DIR else "not cached: no writable cache directory"
        print(f"influence-gbdt: compiling its kernels for this model ({why}; about 15-60 s once, "
              f"{where}).", file=sys.stderr, flush=True)

    def on_end(self, event: Any) -> None:
        pass


_NOTICE = _CompileNotice()
_event.register("numba:compile", _NOTICE)


@contextlib.contextmanager
def no_compile_notice() -> Iterator[None]:
    """Within this block, compiling a kernel says nothing on stderr (the command line's
    ``--quiet``)."""
    _NOTICE.silenced += 1
    try:
        yield
    finally:
        _NOTICE.silenced -= 1


def _refuse_python_calls(dispatcher: Any) -> None:
    """Make a call of the wrapper-less ``dispatcher`` from Python raise TypeError.

    numba's C dispatcher calls the Python wrapper of the overload that matches the arguments; an
    internal kernel has none (a null function pointer). Its overloads are therefore kept out of
    that table (compiled code finds them through ``overloads``), so every Python call takes the
    path that compiles, which raises."""
    name = f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}"

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{name} is compiled for the package's other kernels only and cannot be "
                        "called from Python.")

    dispatcher._insert = lambda *args, **kwargs: None
    dispatcher._compile_for_args = refuse


def _compile_unliteral(dispatcher: Any) -> None:
    """Make calls from other kernels compile ``dispatcher`` for the arguments' plain types.

    Called from compiled code with a constant (``kernel(tb, ..., False, -1)``), numba compiles the
    callee for the *literal* types (``Literal[bool](False)``), once per distinct constant at every
    call site, and again for every kernel the callee calls: measured 18 versions of one kernel in the
    test suite, which made a cold start cost minutes. Constants still convert to the plain types
    implicitly, so one version serves every call site.
    """
    typed = type(dispatcher).get_call_template

    def get_call_template(args: Any, kws: Any) -> Any:
        return typed(dispatcher, tuple(_types.unliteral(a) for a in args),
                     {k: _types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template


jit = njit  # numba >= 0.59: jit compiles in nopython mode, like njit


def __getattr__(name: str) -> Any:  # everything else is numba's own (numba.types, ...)
    return getattr(_numba, name)
