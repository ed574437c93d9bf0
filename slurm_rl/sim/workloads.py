"""Seeded workload families: synthetic GPU-cluster traces for training and for evaluation
beyond the ITP clusters (`slurm-rl trace generate`, docs/simulator.md "Workload families").

A family fixes the shape of a workload: which GPU counts jobs ask for, how long they run, how
they arrive. The load is not part of it: the simulator sizes the cluster for a target load
(`--load`), so one trace serves every load. Traces carry no time limits: the simulator's
time-limit model gives them (docs/simulator.md). The same family, job count and seed give the
same trace, on any machine (Python's `random.Random`, no numpy).

Durations are drawn from a mixture of log-normals (each component: a weight, a median and a
sigma of the natural log), clipped to the family's bounds; GPU counts from a discrete mix; a
job wider than a node runs across nodes (a gang). Arrivals are Poisson at a base rate,
modulated by a daily cycle where the family has one, plus bursts of short jobs where it has
them. `itp` resamples (GPU count, duration) pairs of the shipped ITP TRAINING clusters
(`slurm_rl.splits.TRAINING`), so it follows their marginals and their correlation.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from dataclasses import dataclass
from functools import cache

from slurm_rl.sim.trace import TraceJob

HOUR, DAY = 3600.0, 86400.0


@dataclass(frozen=True, kw_only=True)
class LogNormal:
    weight: float
    median_s: float
    sigma: float
    gpus: tuple[tuple[int, float], ...] = ()
    """The GPU mix of the jobs drawn from this component (empty: the family's)."""


@dataclass(frozen=True, kw_only=True)
class Burst:
    """Every `every_s` on average (exponential gaps), `jobs` short jobs arrive within
    `span_s`, each with `gpus` GPUs and a log-normal run time."""

    every_s: float
    jobs: int
    span_s: float
    gpus: int
    duration: LogNormal


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    about: str
    gpus: tuple[tuple[int, float], ...] = ()
    """(GPU count, share); empty for `itp` (resampled pairs)."""
    durations: tuple[LogNormal, ...] = ()
    min_s: float = 60.0
    max_s: float = 49 * DAY
    mean_gap_s: float = 600.0
    """Mean time between arrivals of the base stream."""
    diurnal: float = 0.0
    """Peak-to-mean amplitude of the daily cycle (0: none; 0.8: peak 1.8x, trough 0.2x the
    mean rate, peak at 14:00 of the trace's clock)."""
    burst: Burst | None = None
    resample_itp: bool = False

    def describe(self) -> str:
        if self.resample_itp:
            shape = "GPU count and run time resampled from the ITP training clusters"
        else:
            mix = _mix(self.gpus)
            parts = ", ".join(f"{c.weight:.0%} median {_span(c.median_s)} sigma {c.sigma:g}"
                              + (f" (GPUs {_mix(c.gpus)})" if c.gpus else "")
                              for c in self.durations)
            shape = f"GPUs {mix}; run times {parts} (clipped to {_span(self.min_s)}-" \
                    f"{_span(self.max_s)})"
        extra = [f"a job every {_span(self.mean_gap_s)} on average"]
        if self.diurnal:
            extra.append(f"daily cycle, amplitude {self.diurnal:g}")
        if self.burst is not None:
            b = self.burst
            extra.append(f"every {_span(b.every_s)} a burst of {b.jobs} {b.gpus}-GPU jobs "
                         f"(median {_span(b.duration.median_s)}) within {_span(b.span_s)}")
        return f"{self.about}. {shape}; {'; '.join(extra)}."


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family(name="itp", about="ITP-like: the training clusters' jobs, resampled",
           resample_itp=True, mean_gap_s=900.0),
    Family(name="heavy-tail",
           about="Another kind of GPU cluster: most jobs are single-GPU and a few minutes "
                 "long, with multi-node jobs and runs of weeks",
           gpus=((1, 0.99), (2, 0.01)),
           durations=(LogNormal(weight=0.80, median_s=240.0, sigma=1.3),
                      LogNormal(weight=0.17, median_s=3 * HOUR, sigma=1.2,
                                gpus=((1, 0.9), (2, 0.04), (4, 0.03), (8, 0.03))),
                      LogNormal(weight=0.03, median_s=4 * DAY, sigma=0.9,
                                gpus=((8, 0.5), (16, 0.3), (1, 0.2)))),
           mean_gap_s=300.0),
    Family(name="burst",
           about="Long wide jobs that fill the cluster, and bursts of short jobs behind them",
           gpus=((8, 0.5), (16, 0.3), (4, 0.2)),
           durations=(LogNormal(weight=0.6, median_s=1.5 * DAY, sigma=0.6),
                      LogNormal(weight=0.4, median_s=6 * HOUR, sigma=0.8)),
           mean_gap_s=4 * HOUR,
           burst=Burst(every_s=1.5 * DAY, jobs=300, span_s=6 * HOUR, gpus=1,
                       duration=LogNormal(weight=1.0, median_s=300.0, sigma=0.8))),
    Family(name="diurnal", about="ITP-like jobs arriving with a strong daily cycle",
           resample_itp=True, mean_gap_s=900.0, diurnal=0.8),
    Family(name="wide", about="Multi-node training: many jobs span several nodes",
           gpus=((1, 0.35), (4, 0.2), (8, 0.2), (16, 0.15), (32, 0.08), (64, 0.02)),
           durations=(LogNormal(weight=0.7, median_s=3 * HOUR, sigma=1.1),
                      LogNormal(weight=0.3, median_s=20 * HOUR, sigma=0.8)),
           mean_gap_s=1800.0),
    Family(name="debug", about="Interactive and debugging work: mostly minutes, some days",
           gpus=((1, 0.8), (2, 0.1), (4, 0.07), (8, 0.03)),
           durations=(LogNormal(weight=0.70, median_s=300.0, sigma=1.0),
                      LogNormal(weight=0.25, median_s=4 * HOUR, sigma=0.9),
                      LogNormal(weight=0.05, median_s=1.5 * DAY, sigma=0.5)),
           mean_gap_s=180.0, diurnal=0.5),
)}
"""The shipped families, by name."""

HELD_OUT_FAMILIES = ("heavy-tail", "burst", "wide", "debug")
"""Families kept out of training (the scenarios file of `slurm-rl train` refuses them): used
only to evaluate and report (docs/rl.md; the robustness suite, docs/evaluation.md). `itp` and
`diurnal`, resampled from the ITP TRAINING clusters, are the ones to train on."""


def generate(family: str | Family, jobs: int, seed: int = 0) -> tuple[TraceJob, ...]:
    """`jobs` jobs of `family`, in submit order, ids f"{name}-{n}"; the first arrives at 0."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    rng = random.Random(f"{fam.name}:{seed}")
    out: list[tuple[float, int, float]] = []  # (submit, gpus, duration)
    base = _arrivals(fam, rng)
    bursts = _bursts(fam, rng)
    next_burst = next(bursts, None)
    pairs = _itp_pairs() if fam.resample_itp else ()
    while len(out) < jobs:
        t = next(base)
        while next_burst is not None and next_burst[0] <= t and len(out) < jobs:
            out.append(next_burst)
            next_burst = next(bursts, None)
        if len(out) >= jobs:
            break
        if pairs:
            g, d = pairs[rng.randrange(len(pairs))]
            d *= math.exp(rng.gauss(0.0, 0.3))
        else:
            c = _component(rng, fam.durations)
            g = _pick(rng, c.gpus or fam.gpus)
            d = c.median_s * math.exp(rng.gauss(0.0, c.sigma))
        out.append((t, g, min(max(d, fam.min_s), fam.max_s)))
    out.sort(key=lambda e: e[0])
    t0 = out[0][0]
    return tuple(TraceJob(id=f"{fam.name}-{n}", submit=round(s - t0, 3), duration=round(d, 3),
                          gpus=g) for n, (s, g, d) in enumerate(out))


def write_csv(jobs: tuple[TraceJob, ...], path: str) -> None:
    """The ITP raw layout (`job_id,submission_time,duration,num_gpu`: `--format itp`)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trace-", suffix=".csv")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write("job_id,submission_time,duration,num_gpu\n")
            for j in jobs:
                fh.write(f"{j.id},{j.submit!r},{j.duration!r},{j.gpus}\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# -- drawing ---------------------------------------------------------------------------------

def _arrivals(fam: Family, rng: random.Random):  # type: ignore[no-untyped-def]
    """Base-stream arrival times: Poisson, thinned by the daily cycle (Lewis-Shedler)."""
    t, a = 0.0, fam.diurnal
    rate_max = (1.0 + a) / fam.mean_gap_s
    while True:
        t += rng.expovariate(rate_max)
        if a == 0.0 or rng.random() * (1.0 + a) <= 1.0 + a * math.cos(
                2 * math.pi * (t - 14 * HOUR) / DAY):
            yield t


def _bursts(fam: Family, rng: random.Random):  # type: ignore[no-untyped-def]
    b = fam.burst
    if b is None:
        return
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / b.every_s)
        for s in sorted(t + rng.uniform(0.0, b.span_s) for _ in range(b.jobs)):
            d = min(max(_draw(rng, (b.duration,)), fam.min_s), fam.max_s)
            yield (s, b.gpus, d)


def _pick(rng: random.Random, mix: tuple[tuple[int, float], ...]) -> int:
    x = rng.random() * sum(p for _, p in mix)
    for g, p in mix:
        x -= p
        if x < 0:
            return g
    return mix[-1][0]


def _component(rng: random.Random, parts: tuple[LogNormal, ...]) -> LogNormal:
    x = rng.random() * sum(c.weight for c in parts)
    for c in parts:
        x -= c.weight
        if x < 0:
            return c
    return parts[-1]


def _draw(rng: random.Random, parts: tuple[LogNormal, ...]) -> float:
    c = _component(rng, parts)
    return c.median_s * math.exp(rng.gauss(0.0, c.sigma))


@cache
def _itp_pairs() -> tuple[tuple[int, float], ...]:
    from slurm_rl.sim.run import load_jobs, resolve_trace_path
    from slurm_rl.splits import TRAINING

    pairs: list[tuple[int, float]] = []
    for c in TRAINING:
        for j in load_jobs(resolve_trace_path(f"data:itp-deadline-cluster{c}.csv"),
                           "itp-deadline"):
            pairs.append((j.gpus, j.duration))
    return tuple(pairs)


def _mix(mix: tuple[tuple[int, float], ...]) -> str:
    return ", ".join(f"{g}: {p:.0%}" for g, p in mix)


def _span(s: float) -> str:
    if s < HOUR:
        return f"{s / 60:g} min"
    if s < DAY:
        return f"{s / HOUR:g} h"
    return f"{s / DAY:g} d"
