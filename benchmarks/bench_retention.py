"""Database size under churn with retention: does the file stop growing?

Synthetic daemon cycles against a temporary database, through the same functions the daemon
calls (upsert_jobs, record_node_samples, record_decision, plan/finish actions, prune), much
faster than the daemon's real rate: every cycle submits new jobs, starts and finishes others,
re-ranks every pending job (a decision entry each), samples every GPU of every node, and sends
one SiteFactor action; retention is a short window (default 20 s) instead of days. Prints the
file sizes (database, WAL), SQLite's free pages and the row counts every 10 s. With retention
working, the database stops growing once the window is full: deleted pages are reused.

    .venv/bin/python benchmarks/bench_retention.py [--seconds 120] [--retention-s 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from slurm_rl.core import (
    Decision,
    GpuSample,
    Intent,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
)
from slurm_rl.db.actions import (
    ActionOutcome,
    ActionSpec,
    finish_actions,
    plan_actions,
    record_decision,
)
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import record_node_samples, upsert_jobs
from slurm_rl.db.retention import DAY_S, PruneReport, prune

TABLES = ("jobs", "job_events", "decision_entries", "decisions", "actions", "action_jobs",
          "gpu_samples")


class Churn:
    """A queue that turns over: `per_cycle` jobs arrive, start and finish every cycle."""

    def __init__(self, *, pending: int, per_cycle: int, nodes: int) -> None:
        self.per_cycle = per_cycle
        self.next_id = 1
        self.pending: list[JobView] = []
        self.running: list[JobView] = []
        self.nodes = [NodeName(f"n{i:03d}") for i in range(nodes)]
        self.cycle = 0
        now = time.time()
        for _ in range(pending):
            self.pending.append(self._new(now))
        self._unsent = list(self.pending)

    def _new(self, now: float) -> JobView:
        i = self.next_id
        self.next_id += 1
        return JobView(id=JobId(str(i)), user=f"u{i % 7}", name=f"train-{i}", partition="gpu",
                       state=JobState.PENDING, submit_time=now, gpus=1 + i % 4,
                       intent=Intent(deadline=now + 3600 + i % 1000, total_steps=10_000))

    def step(self, now: float) -> tuple[list[JobView], list[NodeView], Decision]:
        """The jobs that changed this cycle, the nodes with fresh samples, and a decision."""
        self.cycle += 1
        n = self.per_cycle
        initial, self._unsent = self._unsent[n:], []
        finished = [replace(j, state=JobState.COMPLETED, end_time=now)
                    for j in self.running[:n]]
        self.running = self.running[n:]
        started = [replace(j, state=JobState.RUNNING, start_time=now)
                   for j in self.pending[:n]]
        self.pending = self.pending[n:]
        self.running += started
        arrived = [self._new(now) for _ in range(n)]
        self.pending += arrived
        # A new ranking: every pending job moves (ranks rotate each cycle).
        k = len(self.pending)
        order = tuple(JobOrder(job_id=j.id, rank=(r + self.cycle) % k,
                               reason=f"deadline in {3600 + r}s")
                      for r, j in enumerate(self.pending))
        samples = tuple(GpuSample(index=g, util_pct=float((self.cycle + g) % 100),
                                  mem_used_mib=1000.0, mem_total_mib=80_000.0, power_w=300.0,
                                  temp_c=60.0) for g in range(8))
        nodes = [NodeView(name=name, state=NodeState.MIXED, gpus_total=8, gpus_alloc=4,
                          samples=samples, sampled_at=now) for name in self.nodes]
        changed = initial + finished + started + arrived
        return changed, nodes, Decision(policy="bench", order=order)


def cycle(session: Session, churn: Churn, cycle_id: int, now: float, *, retention_s: float,
          batch: int) -> PruneReport:
    changed, nodes, decision = churn.step(now)
    upsert_jobs(session, changed, now=now)
    record_node_samples(session, nodes, now=now)
    session.commit()
    decision_id = record_decision(session, decision, cycle_id=cycle_id, at=now, dry_run=False)
    session.commit()
    pending = tuple(o.job_id for o in decision.order[:200])
    spec = ActionSpec(kind=ActionKind.SITE_FACTOR, job_ids=pending, cycle_id=cycle_id,
                      decision_id=decision_id,
                      argv=("scontrol", "update", f"JobId={','.join(pending)}",
                            f"SiteFactor={cycle_id % 10_000}"))
    (action_id,) = plan_actions(session, [spec], at=now)
    finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=0)], at=now)
    return prune(session, now=now, retention_days=retention_s / DAY_S, batch=batch)


def kib(path: Path) -> float:
    return path.stat().st_size / 1024 if path.exists() else 0.0


def report(session: Session, db: Path, elapsed: float, cycles: int, pruned: int) -> float:
    pragma = {p: session.execute(text(f"PRAGMA {p}")).scalar_one()
              for p in ("page_count", "freelist_count")}
    counts = {t: session.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
              for t in TABLES}
    size = kib(db)
    print(f"{elapsed:6.1f}s cycles {cycles:5d}  db {size:8.0f} KiB  wal "
          f"{kib(Path(f'{db}-wal')):7.0f} KiB  pages {pragma['page_count']:6d} free "
          f"{pragma['freelist_count']:5d}  pruned {pruned:7d}  rows "
          + " ".join(f"{t}={c}" for t, c in counts.items()), flush=True)
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--retention-s", type=float, default=20.0)
    ap.add_argument("--cycle-s", type=float, default=0.1,
                    help="Seconds between cycles (the daemon's default is 10).")
    ap.add_argument("--pending", type=int, default=500)
    ap.add_argument("--per-cycle", type=int, default=10,
                    help="Jobs that arrive, start and finish per cycle.")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2000, help="[database] prune_batch")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
        db = Path(tmp) / "churn.db"
        engine = make_engine(db)
        upgrade(engine)
        sessions = make_session_factory(engine)
        churn = Churn(pending=args.pending, per_cycle=args.per_cycle, nodes=args.nodes)
        print(f"retention {args.retention_s:g}s, a cycle every {args.cycle_s:g}s, "
              f"{args.pending} pending, {args.per_cycle} jobs in/out per cycle, "
              f"{args.nodes} nodes x 8 GPUs sampled per cycle, prune_batch {args.batch}")
        sizes: list[tuple[float, float]] = []
        start = time.monotonic()
        next_print = 10.0
        cycles = pruned = 0
        prune_s = 0.0
        with sessions() as session:
            while (elapsed := time.monotonic() - start) < args.seconds:
                t0 = time.perf_counter()
                result = cycle(session, churn, cycles + 1, time.time(),
                               retention_s=args.retention_s, batch=args.batch)
                cycles += 1
                pruned += result.total
                prune_s = max(prune_s, time.perf_counter() - t0)
                if elapsed >= next_print:
                    sizes.append((elapsed, report(session, db, elapsed, cycles, pruned)))
                    next_print += 10.0
                time.sleep(max(0.0, args.cycle_s - (time.perf_counter() - t0)))
            sizes.append((elapsed, report(session, db, elapsed, cycles, pruned)))
        engine.dispose()
    half = [s for t, s in sizes if t >= args.seconds / 2]
    print(f"slowest cycle (all writes + prune) {prune_s * 1000:.0f} ms; database size from "
          f"{args.seconds / 2:.0f}s to the end: {min(half):.0f}..{max(half):.0f} KiB "
          f"(growth {100 * (half[-1] - half[0]) / half[0]:+.1f}%)")


if __name__ == "__main__":
    main()
