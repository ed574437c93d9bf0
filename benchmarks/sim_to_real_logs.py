"""The real side of the sim-to-real check (benchmarks/sim_to_real.py), and the comparison.

What a replay on the test cluster gives: its jobs as they ran (ReplayJob, RealJob), when the
daemon's cycles ran (daemon_timing, from the daemon's log), when slurmctld accepted, started and
completed each job and when its schedulers ran (job_events, slurm_timing, from slurmctld's debug
log); a replay saved with --raw read back (load_raw); and the figures that compare it with the
simulator (compare: Kendall tau-b of start times, per-job JCT error).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ReplayJob:
    name: str
    submit_offset: float
    seconds: int
    gpus: int
    deadline_offset: float | None
    steps: int | None = None
    """An elastic replay's job: its steps (at the profiled rate of its GPU count); None: a
    `sleep` of `seconds`."""
    gpus_max: int | None = None
    """With `elastic`: the top of its --rl-gpus range (`gpus` is the bottom and the count its
    `seconds` are measured at)."""
    elastic: bool = False


@dataclass(frozen=True, kw_only=True)
class RealJob:
    """One job as it ran on the cluster. Times are epoch seconds from slurmctld's log
    (millisecond stamps: submission accepted, started, completed), or, without the log, the
    rlsbatch call's midpoint and the job's own stamps."""

    job: ReplayJob
    job_id: str
    submit: float
    start: float
    end: float
    deadline: float | None
    nodes: str = ""
    """Slurm's node list (node3, node[1-2])."""
    slurm_start: float | None = None
    """Slurm's StartTime as squeue shows it (whole seconds): start order is compared at this
    resolution."""
    payload: tuple[float, float] | None = None
    """The job's own stamps: its script's first and last instruction."""
    runs: tuple[tuple[float, int], ...] = ()
    """An elastic replay's job: each run's own start stamp and GPU count."""
    resizes: int = 0
    preemptions: int = 0
    """Restarts the daemon carried out on this job (its requeues DONE in the action log)."""
    waits: tuple[float, ...] = ()
    """Per restart: from the job's checkpoint on the signal to its next start (its stamps)."""


@dataclass(frozen=True, kw_only=True)
class DaemonTiming:
    """When the real daemon's cycles ran, from its log: the phase of its fixed-rate 1 s cycle
    (epoch seconds mod 1), its median poll-to-act time over cycles that changed something, and
    each cycle's instant (epoch seconds; the phase moves whenever a cycle overruns) and its own
    delay from that instant to the end of its act (its updates have all reached slurmctld by
    then)."""

    phase_s: float
    delay_s: float
    cycles: int
    starts: tuple[float, ...] = ()
    delays: tuple[float, ...] = ()
    """Per cycle in `starts` (replays saved before these were kept have none)."""
    graces: tuple[float, ...] = ()
    """Per restart, from its signal to its requeue (the action log's commands): the grace is
    over at the first cycle `grace_s` after the signal's, and the requeue runs after that
    cycle's decision is applied."""


_CYCLE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO cycle \d+: .*"
                    r"made (\d+) job updates.* total ([\d.]+)s$")
_POLL = re.compile(r" poll ([\d.]+)s")


def daemon_timing(log: Path, db: Path | None = None) -> DaemonTiming | None:
    """From the daemon's log (and, where given, its database: the instant each cycle began,
    `decisions.at`; the log line comes after the cycle's restarts and pruning too, so its
    time less the cycle's total is late by those whenever they ran). A cycle sees the cluster
    as squeue answers during its poll: its instant is taken as the poll's middle, and its
    decision reaches Slurm at the end of its act (the cycle's total from its beginning)."""
    begins: list[float] = []
    totals: list[float] = []
    polls: list[float] = []
    changed: list[float] = []  # the delays of the cycles that made updates (the median's)
    for line in log.read_text().splitlines():
        m = _CYCLE.match(line)
        if not m:
            continue
        at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(m[2]) / 1000
        total = float(m[4])
        p = _POLL.search(line)
        begins.append(at - total)
        totals.append(total)
        polls.append(min(total, float(p[1])) / 2 if p else 0.0)
        if int(m[3]) > 0:
            changed.append(total - polls[-1])
    if not begins:
        return None
    if db is not None and db.is_file():
        with sqlite3.connect(db) as con:
            ats = [a for (a,) in con.execute("SELECT at FROM decisions ORDER BY cycle_id")]
        if len(ats) == len(begins):
            begins = ats
        graces = _graces(db)
    else:
        graces = ()
    starts = [b + p for b, p in zip(begins, polls, strict=True)]
    delays = [t - p for t, p in zip(totals, polls, strict=True)]
    # The cycle is fixed-rate (interval minus the cycle's own time): one phase for all.
    phases = sorted(t % 1.0 for t in starts)
    return DaemonTiming(phase_s=round(statistics.median(phases), 3),
                        delay_s=round(statistics.median(changed or [0.0]), 3),
                        cycles=len(starts), starts=tuple(round(t, 3) for t in starts),
                        delays=tuple(delays), graces=graces)


def _graces(db: Path) -> tuple[float, ...]:
    """Per restart in the action log: its requeue's start less its signal's."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT j.job_id, lower(a.kind), a.started_at FROM actions a JOIN action_jobs j "
            "ON j.action_id = a.id WHERE lower(a.kind) IN ('preempt_signal', 'resize_signal', "
            "'preempt_requeue', 'requeue_hold') AND lower(a.status) = 'done' "
            "ORDER BY a.id").fetchall()
    signalled: dict[str, float] = {}
    out: list[float] = []
    for job_id, kind, at in rows:
        if kind.endswith("_signal"):
            signalled[job_id] = at
        elif job_id in signalled:
            out.append(round(at - signalled.pop(job_id), 3))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Cycle:
    """When one of slurmctld's scheduler cycles ran during the replay: each run's instant
    (epoch seconds, from slurmctld's debug log, millisecond stamps) and a grid anchor + k x
    period fitted to them for after the last one. Only when the scheduler ran is used, not
    what it did."""

    period_s: float
    anchor_s: float
    times: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class SlurmTiming:
    backfill: Cycle | None
    """"sched/backfill: _attempt_backfill: beginning" lines (DebugFlags=Backfill)."""
    main: Cycle | None
    """"sched: Running job scheduler" lines (SlurmctldDebug=debug)."""
    launch_s: float | None = None
    """Median time from a job's start line in the log to the job's own first stamp."""


_BF_RUN = re.compile(r"^\[(\S+)\] sched/backfill: _attempt_backfill: beginning")
_MAIN_RUN = re.compile(r"^\[(\S+)\] debug:  sched: Running job scheduler")


def slurm_timing(lines: list[str], real: list[RealJob], t0: float, t1: float) -> SlurmTiming:
    """From slurmctld's log lines: when its two schedulers ran in [t0, t1]; and the launch
    latency of the replay's jobs (their own first stamp after the logged start)."""
    bf: list[float] = []
    main: list[float] = []
    for line in lines:
        m = _BF_RUN.match(line) or _MAIN_RUN.match(line)
        if m:
            t = datetime.fromisoformat(m[1]).timestamp()
            if t0 <= t <= t1:
                (bf if m.re is _BF_RUN else main).append(t)
    lags = [r.payload[0] - r.start for r in real if r.payload and r.payload[0] != r.start]
    return SlurmTiming(backfill=_cycle(bf), main=_cycle(main),
                       launch_s=round(statistics.median(lags), 3) if lags else None)


def _cycle(times: list[float]) -> Cycle | None:
    if len(times) < 3:
        return None
    times.sort()
    ks = [round(t - times[0]) for t in times]
    mk, mt = statistics.fmean(ks), statistics.fmean(times)
    var = sum((k - mk) ** 2 for k in ks)
    period = (sum((k - mk) * (t - mt) for k, t in zip(ks, times, strict=True)) / var
              if var else 1.0)
    anchor = statistics.median(t - period * k for k, t in zip(ks, times, strict=True))
    return Cycle(period_s=round(period, 6), anchor_s=round(anchor, 3),
                 times=tuple(round(t, 3) for t in times))


_EVENT = re.compile(r"^\[(\S+)\] (?:(_slurm_rpc_submit_batch_job: )|(sched/backfill: _start_job: "
                    r"Started |sched: Allocate )|(_job_complete: ))JobId=(\d+)( done)?")


def job_events(lines: list[str], ids: set[str]) -> dict[str, dict[str, float]]:
    """Per job id: when slurmctld accepted it ("submit"), first started it ("start") and saw it
    complete ("done"; a requeue is no completion), from its log (millisecond stamps)."""
    out: dict[str, dict[str, float]] = {}
    for line in lines:
        m = _EVENT.match(line)
        if not m or m[5] not in ids:
            continue
        kind = "submit" if m[2] else "start" if m[3] else "done" if m[6] else None
        if kind:
            seen = out.setdefault(m[5], {})
            if kind != "start" or kind not in seen:  # a requeued job: its first start
                seen[kind] = datetime.fromisoformat(m[1]).timestamp()
    return out


SimOut = dict[str, tuple[float, float, str]]
"""job id -> (start, end, first node list) in epoch seconds."""


def kendall_tau_b(xs: list[float], ys: list[float]) -> float:
    conc = disc = tx = ty = 0
    n = len(xs)
    for i in range(n):
        for k in range(i + 1, n):
            dx, dy = xs[i] - xs[k], ys[i] - ys[k]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else 1.0


def compare(real: list[RealJob], sim: SimOut) -> dict[str, float]:
    # Start order at Slurm's resolution (whole seconds; jobs started in one scheduling pass tie
    # there instead of being ordered by milliseconds of launch noise).
    rs = [r.slurm_start if r.slurm_start is not None else math.floor(r.start) for r in real]
    ss = [float(math.floor(sim[r.job_id][0])) for r in real]
    errors = []
    for r in real:
        real_jct = r.end - r.submit
        sim_jct = sim[r.job_id][1] - r.submit
        errors.append(abs(sim_jct - real_jct) / real_jct)
    errors.sort()
    same_nodes = sum(1 for r in real if r.nodes and r.nodes == sim[r.job_id][2])
    return {"jobs": len(real), "kendall_tau_b": round(kendall_tau_b(rs, ss), 4),
            "same_first_nodes": same_nodes,
            "mean_jct_error": round(sum(errors) / len(errors), 4),
            "p90_jct_error": round(errors[int(0.9 * (len(errors) - 1))], 4),
            "mean_real_jct_s": round(sum(r.end - r.submit for r in real) / len(real), 1)}


def _load_cycle(d: dict[str, Any] | None) -> Cycle | None:
    if not d:
        return None
    return Cycle(period_s=float(d["period_s"]), anchor_s=float(d["anchor_s"]),
                 times=tuple(d.get("times", ())))


def load_raw(path: Path
             ) -> dict[str, tuple[list[RealJob], DaemonTiming | None, SlurmTiming | None]]:
    """A saved replay (--raw): the real side of each policy, to simulate again."""
    out = {}
    for policy, data in json.loads(path.read_text()).items():
        rows = data["jobs"] if isinstance(data, dict) else data  # older files: a bare list
        timing = (DaemonTiming(**{**data["daemon"],
                                  "starts": tuple(data["daemon"].get("starts", ())),
                                  "delays": tuple(data["daemon"].get("delays", ())),
                                  "graces": tuple(data["daemon"].get("graces", ()))})
                  if isinstance(data, dict) and data["daemon"] else None)
        st = data.get("slurm") if isinstance(data, dict) else None
        bf = (SlurmTiming(backfill=_load_cycle(st["backfill"]), main=_load_cycle(st["main"]),
                          launch_s=st.get("launch_s")) if st else None)
        out[policy] = ([RealJob(job=ReplayJob(name=r["job_id"], submit_offset=0.0,
                                              seconds=r["sleep"], gpus=r["gpus"],
                                              deadline_offset=None, steps=r.get("steps"),
                                              gpus_max=r.get("gpus_max"),
                                              elastic=r.get("elastic", False)),
                                job_id=r["job_id"], submit=r["submit"], start=r["real_start"],
                                end=r["real_end"], deadline=r["deadline"],
                                nodes=r.get("real_nodes", ""),
                                slurm_start=r.get("slurm_start", r["real_start"]),
                                payload=tuple(r["payload"]) if r.get("payload") else None,
                                runs=tuple((float(a), int(g)) for a, g in r.get("runs", ())),
                                resizes=r.get("resizes", 0),
                                preemptions=r.get("preemptions", 0),
                                waits=tuple(float(w) for w in r.get("waits", ())))
                        for r in rows], timing, bf)
    return out
