"""Influence on Dask at scale: synthetic rows on a LocalCluster whose workers each hold part of them.

The training rows are a Dask array generated block by block on the workers from per-block seeds.
The model must have been trained on exactly those rows (the self-check proves it), so the script
first trains an ``XGBClassifier`` in memory on the same blocks, generated again here: that is the
user's training step, not part of what is measured. The client then releases it; the measured part
(``fit`` = describe + replay + self-check; one exact reverse sweep of the mean test loss and
single_point LeafRefit of every row on the mean loss of ``--local-test`` test points, each reduced
to a few numbers on the workers; all_points LeafRefit of ``--refit-rows`` rows) never gathers an
n-sized array. Reported: wall times,
each worker's peak resident memory as its system monitor sampled it (every 0.5 s; not
``ru_maxrss``, which a worker inherits from the client that started it), the workers the nanny
restarted (past 95% of their limit: their tasks ran again elsewhere), next to the size of the full
leaf matrix.

Usage::

    python benchmarks/distributed_influence.py --rows 10_000_000 --trees 30 --workers 4 --memory-limit 1GB
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import numpy as np

N_FEATURES = 4


def block(seed: int, start: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start .. start + size`` of the synthetic set: float32 features and 0/1 labels."""
    rng = np.random.default_rng([seed, start])
    X = rng.normal(size=(size, N_FEATURES)).astype(np.float32)
    noise = rng.normal(scale=0.8, size=size)
    y = (X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + noise > 0).astype(np.float64)
    return X, y


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (Linux reports ru_maxrss in KB; it is inherited
    across fork and exec, so it measures the client only)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_peak_mb(dask_worker: Any) -> float:
    """A worker's largest resident memory among its system monitor's samples, in MB."""
    return max(dask_worker.monitor.quantities["memory"]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=500_000)
    parser.add_argument("--trees", type=int, default=30)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--memory-limit", default="1GB")
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--refit-rows", type=int, default=8, help="rows deleted by all_points LeafRefit")
    parser.add_argument("--local-test", type=int, default=20,
                        help="test points whose mean loss single_point LeafRefit scores every row on")
    args = parser.parse_args()

    import dask
    import dask.array as da
    import xgboost
    from distributed import Client, LocalCluster

    from influence_gbdt import BoostingInfluence

    starts = list(range(0, args.rows, args.chunk))
    sizes = [min(args.chunk, args.rows - s) for s in starts]
    t0 = time.perf_counter()
    parts = [block(args.seed, s, n) for s, n in zip(starts, sizes, strict=True)]
    model = xgboost.XGBClassifier(n_estimators=args.trees, max_depth=args.depth, n_jobs=2).fit(
        np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    del parts
    train_s = time.perf_counter() - t0
    X_test, y_test = block(args.seed + 1, 0, args.test)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit=args.memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gen = [dask.delayed(block)(args.seed, s, n) for s, n in zip(starts, sizes, strict=True)]
        X = da.concatenate([da.from_delayed(g[0], (n, N_FEATURES), np.float32)
                            for g, n in zip(gen, sizes, strict=True)])
        y = da.concatenate([da.from_delayed(g[1], (n,), np.float64) for g, n in zip(gen, sizes, strict=True)])
        started = set(client.scheduler_info()["workers"])
        t0 = time.perf_counter()
        explainer = BoostingInfluence(model).fit(X, y)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores = explainer.score_training_points(X_test, y_test, aggregate="mean")
        summary = da.stack([scores.max(), scores.min(), (scores > 0).mean()]).compute()
        sweep_s = time.perf_counter() - t0
        t0 = time.perf_counter()  # single_point LeafRefit of every row: on its own partition
        explainer.set_params(method="leaf_refit", update_set="single_point")
        few = slice(0, args.local_test)  # O(rows x test points x trees) of loss evaluations
        local = explainer.score_training_points(X_test[few], y_test[few], aggregate="mean")
        local_summary = da.stack([local.max(), local.min(), (local > 0).mean()]).compute()
        single_point_s = time.perf_counter() - t0
        t0 = time.perf_counter()  # all_points LeafRefit of a few rows: a reduction per tree
        explainer.set_params(update_set="all_points")
        rows = np.linspace(0, args.rows - 1, args.refit_rows).astype(np.int64)
        refit = explainer.score_training_points(X_test, y_test, aggregate="mean", training_points=rows)
        all_points_s = time.perf_counter() - t0
        worker_peak = client.run(worker_peak_mb)
        restarted = len(started - set(client.scheduler_info()["workers"]))
    leaf_matrix_mb = args.rows * int(explainer.engine_.ensemble.n_trees) * 4 / 2**20
    print(json.dumps({
        "rows": args.rows, "trees": explainer.engine_.ensemble.n_trees, "partitions": len(starts),
        "workers": args.workers, "memory_limit": args.memory_limit,
        "full_leaf_matrix_mb": round(leaf_matrix_mb), "train_in_memory_s": round(train_s, 1),
        "fit_s": round(fit_s, 1), "reverse_sweep_mean_loss_s": round(sweep_s, 1),
        "self_check_relative_residual": explainer.reproduction_residual_,
        "score_max_min_share_harmful": [float(v) for v in summary],
        f"leaf_refit_single_point_every_row_{args.local_test}_test_points_s": round(single_point_s, 1),
        "single_point_max_min_share_harmful": [float(v) for v in local_summary],
        f"leaf_refit_all_points_{args.refit_rows}_rows_s": round(all_points_s, 1),
        "all_points_refit_scores": [float(v) for v in refit],
        "worker_peak_rss_mb": {k.rsplit(":", 1)[-1]: round(v) for k, v in worker_peak.items()},
        "workers_restarted": restarted,
        "client_peak_rss_mb": round(peak_rss_mb()),
    }, indent=1))


if __name__ == "__main__":
    main()
