"""Benchmark (not a test): time `upsert_jobs` for 10,000 jobs.

    .venv/bin/python tests/db/bench_upsert.py [--jobs 10000] [--repeat 5]

Prints the median wall time of: all new, nothing changed, 1 % changed state, all changed state,
into a database that already holds `--history` finished jobs. Each run commits, as the daemon
does once per cycle.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from slurm_rl.core import Intent, JobId, JobState, JobView, Progress, ServiceClass
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import upsert_jobs


def make_jobs(n: int) -> list[JobView]:
    jobs = []
    for i in range(n):
        intent = None
        if i % 2 == 0:
            intent = Intent(deadline=1.7e9 + i, hard=i % 4 == 0,
                            service_class=ServiceClass.CRITICAL, gpus_min=1, gpus_max=8,
                            elastic=True, total_steps=10_000, model="resnet50", batch_size=128)
        jobs.append(JobView(
            id=JobId(str(100_000 + i)), user=f"u{i % 50}", name=f"job{i}", partition="gpu",
            state=JobState.PENDING, submit_time=1.7e9 + i, time_limit_s=3600.0, gpus=4,
            nodes=1, managed=intent is not None, intent=intent,
            progress=Progress(steps_done=i, steps_total=10_000, rate=3.5, updated_at=1.7e9)
            if i % 3 == 0 else None,
        ))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--history", type=int, default=0,
                        help="finished jobs already in the database (default 0)")
    args = parser.parse_args()
    jobs = make_jobs(args.jobs)
    old = [dataclasses.replace(j, id=JobId(f"h{j.id}"), state=JobState.COMPLETED)
           for j in make_jobs(args.history)]
    running = [dataclasses.replace(j, state=JobState.RUNNING, start_time=1.8e9) for j in jobs]
    some = [running[i] if i % 100 == 0 else j for i, j in enumerate(jobs)]
    results: dict[str, list[float]] = {k: [] for k in ("all new", "unchanged", "1% changed",
                                                        "all changed")}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            engine = make_engine(Path(tmp) / "bench.db")
            upgrade(engine)
            factory = make_session_factory(engine)
            for chunk in range(0, len(old), 10_000):
                with factory() as session:
                    upsert_jobs(session, old[chunk:chunk + 10_000], now=0.0)
                    session.commit()
            for label, snapshot in (("all new", jobs), ("unchanged", jobs),
                                    ("1% changed", some), ("all changed", running)):
                with factory() as session:
                    t0 = time.perf_counter()
                    upsert_jobs(session, snapshot, now=time.time())
                    session.commit()
                    results[label].append(time.perf_counter() - t0)
            engine.dispose()
    for label, times in results.items():
        print(f"{label:>12}: {statistics.median(times) * 1000:7.1f} ms  "
              f"(min {min(times) * 1000:.1f}; {args.jobs} jobs, {args.history} in history, "
              f"{args.repeat} runs)")


if __name__ == "__main__":
    main()
