"""numba as the kernels use it: where compiled code is cached.

The kernel modules import this module *as* ``numba`` (``from . import _jit as numba``), so their
decorators read as plain numba (``@numba.njit(cache=True, nogil=True)``) while one thing is
decided here, once:

**Cache location.** numba's own ``cache=True`` writes next to the source file, i.e. into the
installed package directory. Files pip did not install stay behind after ``pip uninstall``, and a
leftover ``influence_gbdt/__pycache__`` turns the package into an empty namespace package for the
next install. Here ``cache=True`` means: cache in

1. ``$NUMBA_CACHE_DIR`` if set (numba's own setting; if it is not writable, nothing is cached),
2. else ``$XDG_CACHE_HOME/influence-gbdt``, or ``~/.cache/influence-gbdt`` without XDG_CACHE_HOME,
3. else (no writable directory, e.g. a read-only HOME) nowhere: the kernels compile in memory at
   first use in each process, and nothing is written.

Never into the package directory. :data:`CACHE_DIR` holds the choice made at import: a
subdirectory named by a digest of the package's sources (:func:`source_digest`); in our own
directory (not in ``$NUMBA_CACHE_DIR``) the other versions' subdirectories that nothing has written
to for :data:`STALE_DAYS` days are removed then. numba checks a
cached kernel only against its *own* file's timestamp, so a kernel that calls a function of
another module (every kernel calls the losses) would otherwise keep running the old callee after
that module changed (an upgrade, or an edit in a development install).

No kernel uses numba's ``parallel=True`` layer (whose ``workqueue`` backend aborts the process when
two Python threads enter parallel code at once): kernels release the GIL and the engine runs them
on its own threads, so several threads may score at the same time.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numba as _numba
from numba.core import config as _numba_config
from numba.core import types as _types

_config: Any = _numba_config  # CACHE_DIR is read when a dispatcher is made


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
    chosen = os.path.join(parent, source_digest())
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
    """16 hex digits naming this version of the package's Python sources (names, sizes and
    modification times of every ``.py`` file in the package directory, sub-packages included)."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            stat = os.stat(path)
            digest.update(f"{os.path.relpath(path, root)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


#: Where this process caches compiled kernels (None: in memory only).
CACHE_DIR: str | None = cache_dir()


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` with ``cache=True`` redirected to :data:`CACHE_DIR`; used as ``@njit``,
    ``@njit(...)`` or ``njit(...)(func)``."""
    if args and callable(args[0]):
        return njit(**options)(args[0])
    cache = bool(options.pop("cache", False)) and CACHE_DIR is not None

    def decorate(func: Callable[..., Any]) -> Any:
        if not cache:
            dispatcher = _numba.njit(**options)(func)
        else:
            # numba picks the cache location when the dispatcher is made, from config.CACHE_DIR.
            saved = _config.CACHE_DIR
            _config.CACHE_DIR = CACHE_DIR
            try:
                dispatcher = _numba.njit(cache=True, **options)(func)
            finally:
                _config.CACHE_DIR = saved
        _compile_unliteral(dispatcher)
        return dispatcher

    return decorate


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
