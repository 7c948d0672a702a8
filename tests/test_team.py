"""The engine's thread teams (``engine.team.run``): every member runs once with its number, helper
threads are kept and reused between teams, a helper's error reaches the caller, a forked child (a
Dask or multiprocessing worker) runs teams of its own, and the barrier holds every member until
all have arrived, however long they wait (through its spinning, yielding and napping)."""

from __future__ import annotations

import gc
import multiprocessing
import sys
import threading
import warnings
import weakref

import numba
import numpy as np
import pytest

from influence_gbdt.engine import team


def _mark(tid: int, n_team: int, bar: np.ndarray, seen: np.ndarray) -> None:
    seen[tid] += n_team


def _helpers() -> int:
    return sum(t.name == "influence-gbdt-team" for t in threading.enumerate())


def test_each_member_runs_once_and_helpers_are_reused() -> None:
    for n_team in (1, 2, 5, 3, 5, 4):
        seen = np.zeros(n_team, dtype=np.int64)
        team.run(_mark, n_team, seen)
        np.testing.assert_array_equal(seen, np.full(n_team, n_team))
    before = _helpers()
    assert before >= 4
    for _ in range(20):
        team.run(_mark, 5, np.zeros(5, dtype=np.int64))
    assert _helpers() == before


def test_teams_started_from_several_threads_at_once_each_get_their_members() -> None:
    seen = np.zeros((6, 4), dtype=np.int64)
    threads = [threading.Thread(target=team.run, args=(_mark, 4, seen[i])) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_array_equal(seen, 4)


def test_idle_helpers_keep_no_reference_to_a_team_s_arrays() -> None:
    """An idle helper holding the last team's arguments would keep an engine's arrays (its 1 GB
    derivative cache) alive after the user dropped it."""
    seen = np.zeros(4, dtype=np.int64)
    ref = weakref.ref(seen)
    team.run(_mark, 4, seen)
    del seen
    gc.collect()
    assert ref() is None


def _fail_in_helper(tid: int, n_team: int, bar: np.ndarray) -> None:
    if tid == 2:
        raise ValueError("helper 2 failed")


def test_an_error_in_a_helper_is_raised_to_the_caller() -> None:
    with pytest.raises(ValueError, match="helper 2 failed"):
        team.run(_fail_in_helper, 3)
    seen = np.zeros(3, dtype=np.int64)
    team.run(_mark, 3, seen)  # the helpers serve again
    np.testing.assert_array_equal(seen, 3)


def _child_team(queue: multiprocessing.Queue) -> None:
    seen = np.zeros(3, dtype=np.int64)
    team.run(_mark, 3, seen)
    queue.put(seen.tolist())


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX-only")
def test_a_forked_child_runs_teams_of_its_own() -> None:
    team.run(_mark, 3, np.zeros(3, dtype=np.int64))  # the parent holds idle helpers
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_team, args=(queue,))
    with warnings.catch_warnings():  # Python 3.12+ warns of fork in a process with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == [3, 3, 3]


@numba.njit(nogil=True)
def _rounds(tid: int, n_team: int, bar: np.ndarray, work: np.ndarray, posted: np.ndarray,
            seen: np.ndarray) -> None:
    """Round r: member ``r % n_team`` works ``work[r]`` steps, then posts ``r + 1``; after the
    barrier every member records what it sees posted; a second barrier ends the round."""
    for r in range(posted.shape[0]):
        if tid == r % n_team:
            x = 0.0
            for i in range(work[r]):
                x += np.sqrt(float(i))
            posted[r] = r + 1 + 0.0 * x  # after the work (x keeps the loop)
        team.barrier(bar, n_team)
        seen[tid, r] = posted[r]
        team.barrier(bar, n_team)


@pytest.mark.calls_kernels
@pytest.mark.parametrize("n_team", [2, 3, 8])
def test_the_barrier_holds_every_member_until_all_arrive_however_long_they_wait(n_team: int) -> None:
    """Waits from none to tens of milliseconds: past the barrier's spinning (~30 us), its yielding
    (~1 ms) and into its naps; 8 members on a machine of fewer cores make members wait for others
    that have no core. A member let through early would record a round's value unposted (0)."""
    work = np.array([0, 10, 10**3, 10**5, 10**6, 10**7] * 4, dtype=np.int64)
    rounds = len(work)
    posted = np.zeros(rounds)
    seen = np.zeros((n_team, rounds))
    team.run(_rounds, n_team, work, posted, seen)
    np.testing.assert_array_equal(seen, np.broadcast_to(np.arange(1, rounds + 1), (n_team, rounds)))
