"""Indexing hot row loops without numba's negative-index wrap-around (:data:`INDEX`). Private to
the engine."""

from __future__ import annotations

#: ``k & INDEX`` is ``k`` for an index that is never negative (a leaf, a row, a chunk; below 2**31). A row
#: loop that starts at a thread's or chunk's first row ``j0`` pays numba's wrap-around of negative
#: indices (the array's length added to each) at every access, the lengths reloaded from memory:
#: the compiler cannot prove ``j0`` non-negative. The hot loops instead count their rows from 0
#: over arrays sliced from ``j0`` and index leaves with ``& INDEX``; the compiler then drops the
#: wrap-around. Measured, one thread: the reverse sweep of one test point on LightGBM's default
#: (100 one-step rounds, 32,561 rows) 21.6-21.9 -> 14.5-14.6 ms; CatBoost's at 300 trees (most steps
#: recomputed at the margins) 0.93-0.97 -> 0.76 s; the same loop alone, called with ``j0`` the
#: constant 0, had run 11 ms.
INDEX = 0x7FFFFFFF
