"""The prediction error on the real test cluster (`bench_prediction.py --cluster`; needs
SLURM_CONF). Jobs sleep and report progress with `slurm-rl progress`; the daemon's Poller polls
them; each poll's prediction is compared with the job's real end. Cancels what it submits."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

from slurm_rl.core import JobView
from slurm_rl.daemon.poll import Poller
from slurm_rl.slurm.adapter import SlurmAdapter

RATE = 20
"""Steps per second the jobs make on average."""
TOTAL = 1200
"""Steps per job: about a minute at RATE."""
EVERY = 5
JOBS = 3
SCRIPT = """#!/bin/bash
# {EVERY} s intervals; the steps of each are RATE*EVERY*(1+u), u uniform in [-0.17, 0.17]
# (standard deviation about 10 %).
s=0
while [ "$s" -lt {TOTAL} ]; do
  sleep {EVERY}
  s=$(( s + {RATE} * {EVERY} * (100 + RANDOM % 35 - 17) / 100 ))
  [ "$s" -gt {TOTAL} ] && s={TOTAL}
  {progress} progress "$s" --total {TOTAL} --force
done
"""
BUCKETS = ((0.05, 0.25), (0.25, 0.50), (0.50, 0.75), (0.75, 1.0))


def cluster(*, verbose: bool = False, total: int = TOTAL) -> None:
    progress = Path(sys.executable).with_name("slurm-rl")
    script = SCRIPT.format(EVERY=EVERY, RATE=RATE, TOTAL=total, progress=progress)
    tag = f"rlpred-{uuid.uuid4().hex[:8]}"
    ids: list[str] = []
    samples: list[tuple[str, float, float]] = []  # (job, now, predicted remaining)
    final: dict[str, JobView] = {}
    poller = Poller(SlurmAdapter(scope=lambda record, has_intent: True))
    try:
        for i in range(JOBS):
            out = subprocess.run(
                ["sbatch", "--parsable", "-J", f"{tag}-{i}", "--gres=gpu:1", "-t", "20",
                 "-o", "/dev/null", "-e", "/dev/null"], input=script, text=True,
                capture_output=True, check=True)
            ids.append(out.stdout.strip().split(";")[0])
        wait_s = total / RATE * 1.5 + 120
        deadline = time.time() + wait_s
        while time.time() < deadline and len(final) < len(ids):
            now = time.time()
            polled = poller.poll(now)
            poller.commit(polled)
            for view in polled.jobs:
                if view.id not in ids:
                    continue
                if view.state.is_finished:
                    final[view.id] = view
                elif view.state.is_running and view.predicted_remaining_s is not None:
                    samples.append((view.id, now, view.predicted_remaining_s))
            time.sleep(2)
    finally:
        subprocess.run(["scancel", *ids], capture_output=True, check=False)
    if len(final) < len(ids):
        sys.exit(f"only {len(final)} of {len(ids)} jobs ended within {wait_s:.0f} s")
    errs: dict[tuple[float, float], list[float]] = {b: [] for b in BUCKETS}
    for job_id, now, predicted in samples:
        view = final[job_id]
        if view.start_time is None or view.end_time is None:
            continue
        run = view.end_time - view.start_time
        true = view.end_time - now
        done = (now - view.start_time) / run if run > 0 else 1.0
        if verbose:
            print(f"job {job_id}: {done:6.1%} done, predicted {predicted:6.1f} s, "
                  f"true {true:6.1f} s")
        for lo, hi in BUCKETS:
            if lo <= done < hi and true > 0:
                errs[(lo, hi)].append(abs(predicted - true) / true)
    runs = [v.end_time - v.start_time for v in final.values()
            if v.end_time is not None and v.start_time is not None]
    print(f"test cluster: {len(ids)} jobs of {total} steps at {RATE}/s (±17 % uniform per "
          f"{EVERY} s interval), reports by `slurm-rl progress`, polled every 2 s; "
          f"runs {min(runs):.0f}-{max(runs):.0f} s; end times in whole seconds")
    print(f"{'done':>9} {'polls':>6} {'median':>7} {'p90':>6} {'<=10%':>6}")
    for (lo, hi), e in errs.items():
        e.sort()
        if not e:
            print(f"{lo:>4.0%}-{hi:<4.0%} {0:>6}")
            continue
        p90 = e[min(len(e) - 1, int(0.9 * len(e)))]
        within = sum(x <= 0.10 for x in e) / len(e)
        print(f"{lo:>4.0%}-{hi:<4.0%} {len(e):>6} {e[len(e) // 2]:>7.1%} {p90:>6.1%} "
              f"{within:>6.0%}")
