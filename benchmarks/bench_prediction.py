"""Error of the daemon's remaining-time prediction (slurm_rl/slurm/predict.py). Prints figures.

Traces (default): jobs drawn from the nine ITP deadline traces (slurm_rl/data/traces), each run
at its trace GPU count with its trace duration as the mean run time. Progress is reported every
--interval seconds (30: `slurm-rl progress`'s default throttle) as whole steps; the steps made in
each interval are the mean rate times the interval times (1 + --noise * N(0, 1)), independent
between intervals (default 10 %). With --drift D the rate also changes once, at a uniformly drawn
point of the run, by a factor drawn uniformly from [1 - D, 1 + D] (a phase change the fit cannot
foresee). The true remaining time is that of the drawn run. At each checkpoint (a fraction of the
run done) two predictions are compared:
- `last rate`: the naive prediction: steps left over the rate of the latest report (what
  `slurm-rl progress` measured over its last interval), not counting time since that report;
- `fit`: the rate fitted over the run's reports (first to latest), time since the report taken
  off (slurm/predict.py, as the daemon's Poller uses it).
Error = |predicted - true remaining| / true remaining. A job whose first report comes after the
checkpoint (shorter than interval / fraction) has no prediction there; they are counted apart.

    .venv/bin/python benchmarks/bench_prediction.py                    # 3000 jobs, 10 % noise
    .venv/bin/python benchmarks/bench_prediction.py --drift 0.2
    SLURM_CONF=... .venv/bin/python benchmarks/bench_prediction.py --cluster   # the test cluster

--cluster submits jobs to the real test cluster that sleep and report progress with
`slurm-rl progress` (every 5 s, 10 % noise in the steps per interval), polls them with the
daemon's Poller every 2 s, and compares each poll's prediction with the job's real end
(squeue's EndTime, whole seconds), once 5 % of the run is done.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from importlib import resources

from slurm_rl.core import Progress
from slurm_rl.slurm import predict

CHECKPOINTS = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90)


def simulate_run(duration: float, total: float, rng: random.Random, *, interval: float,
                 noise: float, drift: float) -> tuple[list[tuple[float, int, float]], float]:
    """Reports (time, whole steps, rate over the last interval) and the true end time."""
    rate = total / duration
    change_at = rng.uniform(0, duration) if drift else math.inf
    factor = rng.uniform(1 - drift, 1 + drift) if drift else 1.0
    t, steps = 0.0, 0.0
    reports: list[tuple[float, int, float]] = []
    while True:
        r = rate * (factor if t >= change_at else 1.0) * max(0.05, 1 + noise * rng.gauss(0, 1))
        if steps + r * interval >= total:
            end = t + (total - steps) / r
            return reports, end
        prev = int(steps)
        steps += r * interval
        t += interval
        reports.append((t, int(steps), (int(steps) - prev) / interval))


def predictions(reports: list[tuple[float, int, float]], total: int, now: float
                ) -> tuple[float, float] | None:
    """(last rate, fit) predictions of the remaining time at `now` (None: no report yet)."""
    seen = [r for r in reports if r[0] <= now]
    if not seen:
        return None
    fit = None
    for t, steps, rate in (seen[0], seen[-1]):
        fit = predict.update(fit, Progress(steps_done=steps, steps_total=total,
                                           rate=rate or None, updated_at=t), 0.0, 1)
    t, steps, rate = seen[-1]
    last = (total - steps) / rate if rate > 0 else math.inf
    fitted = predict.remaining(fit, Progress(steps_done=steps, steps_total=total,
                                             rate=rate or None, updated_at=t),
                               now=now, gpus=1, run_start=0.0)
    return last, (fitted if fitted is not None else math.inf)


def traces(args: argparse.Namespace) -> None:
    from slurm_rl.sim import trace

    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = [j for name in sorted(p.name for p in folder.iterdir())
            if name.startswith("itp-deadline") and name.endswith(".csv")
            for j in trace.load(str(folder / name), "itp-deadline").jobs if j.duration > 0]
    rng = random.Random(args.seed)
    sample = rng.sample(jobs, min(args.jobs, len(jobs)))
    errors: dict[float, tuple[list[float], list[float]]] = {c: ([], []) for c in CHECKPOINTS}
    unseen = dict.fromkeys(CHECKPOINTS, 0)
    for job in sample:
        duration = min(job.duration, args.max_duration)
        total = int(job.total_steps or max(1.0, duration))
        reports, end = simulate_run(duration, total, rng, interval=args.interval,
                                    noise=args.noise, drift=args.drift)
        for c in CHECKPOINTS:
            now = c * end
            got = predictions(reports, total, now)
            if got is None:
                unseen[c] += 1
                continue
            true = end - now
            errors[c][0].append(abs(got[0] - true) / true)
            errors[c][1].append(abs(got[1] - true) / true)
    print(f"{len(sample)} ITP deadline-trace jobs (of {len(jobs)}), reports every "
          f"{args.interval:g} s, noise {args.noise:.0%} per interval, drift ±{args.drift:.0%}, "
          f"runs capped at {args.max_duration / 86400:g} days, seed {args.seed}")
    print(f"{'done':>5} {'no report':>9}  {'last rate: median':>17} {'p90':>6} {'<=10%':>6}"
          f"  {'fit: median':>11} {'p90':>6} {'<=10%':>6}")
    for c in CHECKPOINTS:
        last, fit = errors[c]
        print(f"{c:>5.0%} {unseen[c]:>9}  {_row(last)}  {_row(fit, 11)}")


def _row(errs: list[float], width: int = 17) -> str:
    if not errs:
        return f"{'-':>{width}} {'-':>6} {'-':>6}"
    errs = sorted(errs)
    p90 = errs[min(len(errs) - 1, int(0.9 * len(errs)))]
    within = sum(e <= 0.10 for e in errs) / len(errs)
    return f"{statistics.median(errs):>{width}.1%} {p90:>6.1%} {within:>6.0%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--noise", type=float, default=0.10)
    ap.add_argument("--drift", type=float, default=0.0)
    ap.add_argument("--max-duration", type=float, default=7 * 86400.0,
                    help="cap on a run's length in seconds (keeps the run time bounded)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cluster", action="store_true", help="measure on the test cluster")
    ap.add_argument("--cluster-steps", type=int, default=1200,
                    help="steps per cluster job (20 a second)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every cluster poll")
    args = ap.parse_args()
    if args.cluster:
        from bench_prediction_cluster import cluster  # noqa: PLC0415

        cluster(verbose=args.verbose, total=args.cluster_steps)
    else:
        traces(args)


if __name__ == "__main__":
    main()
