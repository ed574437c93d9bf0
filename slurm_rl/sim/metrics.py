"""Summary metrics of a run, and its per-job and per-interval CSV files."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_rl.policies.capabilities import Declining
from slurm_rl.sim.results import DroppedJob, Interval, JobRecord, SimResult


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def declined(policy: object) -> int | None:
    """Deadline jobs the policy declined in its run (None: a policy that declines none)."""
    return policy.declined_jobs if isinstance(policy, Declining) else None


def deadline_hit_rate(jobs: Sequence[JobRecord],
                      dropped: Sequence[DroppedJob] = ()) -> float | None:
    """Share of jobs with a deadline that ended by it (None when no job has one); a job the
    policy dropped (`dropped`) never ends, so each one with a deadline is a miss."""
    hits = [j.end <= j.deadline for j in jobs if j.deadline is not None]
    misses = sum(1 for j in dropped if j.deadline is not None)
    n = len(hits) + misses
    return sum(hits) / n if n else None


def gpu_utilization(result: SimResult) -> float:
    """GPU-seconds held by jobs / (cluster GPUs x makespan)."""
    span = makespan(result.jobs)
    if span <= 0:
        return 0.0
    busy = sum(iv.gpus * (iv.end - iv.start) for iv in result.intervals)
    return busy / (result.config.capacity * span)


def makespan(jobs: Sequence[JobRecord]) -> float:
    """Last end minus first submission."""
    if not jobs:
        return 0.0
    return max(j.end for j in jobs) - min(j.submit for j in jobs)


def summary(result: SimResult) -> dict[str, Any]:
    """The `simulate --json` object. `jobs` and the JCT and wait figures are of the jobs that
    ran; `declined_dropped_jobs` were submitted and dropped by the policy (never ran; each with
    a deadline counts as a miss in `deadline_hit_rate`); `dropped_jobs` never fit the cluster."""
    jct = sorted(j.end - j.submit for j in result.jobs)
    n = len(jct)
    cfg = result.config
    hit = deadline_hit_rate(result.jobs, result.declined_dropped)
    return {
        "policy": result.policy,
        "jobs": n,
        "nodes": cfg.nodes,
        "gpus_per_node": cfg.gpus_per_node,
        "avg_jct_s": sum(jct) / n if n else None,
        "p50_jct_s": percentile(jct, 50) if n else None,
        "p95_jct_s": percentile(jct, 95) if n else None,
        "p99_jct_s": percentile(jct, 99) if n else None,
        "avg_wait_s": sum(j.start - j.submit for j in result.jobs) / n if n else None,
        "makespan_s": makespan(result.jobs),
        "gpu_utilization": gpu_utilization(result),
        "deadline_hit_rate": hit,
        "dropped_jobs": result.dropped,
        "declined_dropped_jobs": len(result.declined_dropped),
        "decisions": result.decisions,
        "preemptions": result.preemptions,
        "resizes": result.resizes,
        "notes": result.notes,
        "seed": cfg.seed,
        "wall_s": result.wall_s,
    }


def _num(x: float) -> str:
    """A time as the CSVs write it: whole seconds as integers, anything else at full precision
    (repr reads back as the same float), so that an interval never seems to end before it
    starts and GPU-seconds add up again."""
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


def write_jobs(path: str | Path, jobs: Sequence[JobRecord]) -> None:
    """One row per job: job_id,submit,start,end,gpus,restarts,deadline (blank: none)."""
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "submit", "start", "end", "gpus", "restarts", "deadline"])
        for j in jobs:
            w.writerow([j.job_id, _num(j.submit), _num(j.start), _num(j.end), j.gpus, j.restarts,
                        "" if j.deadline is None else _num(j.deadline)])


def write_intervals(path: str | Path, intervals: Sequence[Interval]) -> None:
    """One row per run at a fixed GPU count: job_id,start,end,gpus,nodes ('a;b' names)."""
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "start", "end", "gpus", "nodes"])
        for iv in sorted(intervals, key=lambda i: (i.start, i.end, i.job_id)):
            w.writerow([iv.job_id, _num(iv.start), _num(iv.end), iv.gpus, ";".join(iv.nodes)])


def utilization_series(result: SimResult, points: int = 400) -> tuple[list[float], list[float]]:
    """(bin midpoints, share of GPUs busy averaged over the bin) over the run, for plots."""
    if not result.jobs or points <= 0:
        return [], []
    t0 = min(j.submit for j in result.jobs)
    t1 = max(j.end for j in result.jobs)
    if t1 <= t0:
        return [t0] * points, [0.0] * points
    if (t1 - t0) / points == 0.0:  # a span too short to cut into bins (subnormal floats)
        u = gpu_utilization(result)
        return [t0] * points, [u] * points
    deltas: dict[float, int] = {}
    for iv in result.intervals:
        deltas[iv.start] = deltas.get(iv.start, 0) + iv.gpus
        deltas[iv.end] = deltas.get(iv.end, 0) - iv.gpus
    steps = sorted(deltas.items())
    width = (t1 - t0) / points
    edges = [t0 + width * k for k in range(points)] + [t1]
    area = [0.0] * points  # busy GPU-seconds per bin
    busy, last, k = 0, t0, 0
    for t, delta in [*steps, (t1, 0)]:
        while last < t:  # spread busy x [last, t) over the bins it covers
            while k < points - 1 and edges[k + 1] <= last:
                k += 1
            edge = min(t, edges[k + 1])
            area[k] += busy * (edge - last)
            last = edge
            if edge == edges[k + 1] and k < points - 1:
                k += 1
        busy += delta
    cap = result.config.capacity
    return ([t0 + (k + 0.5) * width for k in range(points)],
            [a / (cap * width) for a in area])
