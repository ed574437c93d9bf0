"""The real daemon under churn on the test cluster, with a short retention window: does the
database file stop growing?

A `slurm-rl daemon` (policy deadline, a cycle a second, `[database] retention_days` set to a
short window) runs against the test cluster while this script keeps submitting short jobs with
slurm-rl intents (each runs `sleep 1` on one GPU, so jobs arrive, wait, run and finish all the
time) and cancels a few pending ones. Every 10 s it prints the database and WAL sizes and the
row counts. With retention working the sizes level off once the window is full.

    SLURM_CONF=/var/tmp/slurm-rl-cluster/etc/slurm.conf \\
        .venv/bin/python benchmarks/bench_retention_live.py [--seconds 120] [--retention-s 30]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

SLURM_RL = str(Path(sys.executable).with_name("slurm-rl"))
TABLES = ("jobs", "job_events", "decisions", "decision_entries", "actions", "gpu_samples")


def sizes(db: Path) -> tuple[int, int]:
    wal = db.with_name(db.name + "-wal")
    return (db.stat().st_size if db.exists() else 0), (wal.stat().st_size if wal.exists() else 0)


def counts(db: Path) -> str:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return " ".join(f"{t}={con.execute(f'SELECT count(*) FROM {t}').fetchone()[0]}"
                        for t in TABLES)
    finally:
        con.close()


def submit(prefix: str, i: int, deadline: int) -> str | None:
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", f"{prefix}{i}", "--gres=gpu:1", "-t", "1", "-o",
         "/dev/null", f"--comment={{rl1:d={deadline}}}", "--wrap", "sleep 1"],
        capture_output=True, text=True)
    return out.stdout.strip().split(";")[0] if out.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="how long to churn")
    ap.add_argument("--retention-s", type=float, default=30.0, help="retention window, seconds")
    ap.add_argument("--rate", type=float, default=4.0, help="jobs submitted per second")
    args = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        print("set SLURM_CONF (docker/cluster env)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-retention-live-"))
    db = tmp / "d.db"
    cfg = tmp / "slurm-rl.toml"
    cfg.write_text(f'[database]\npath = "{db}"\nretention_days = {args.retention_s / 86400!r}\n'
                   '[daemon]\ninterval_s = 1.0\npolicy = "deadline"\n')
    prefix = f"rt{uuid.uuid4().hex[:6]}-"
    log = (tmp / "daemon.log").open("w")
    daemon = subprocess.Popen([SLURM_RL, "daemon", "--config", str(cfg),
                               "--only-name-prefix", prefix], stdout=log, stderr=log)
    print(f"daemon pid {daemon.pid}, database {db}, retention {args.retention_s:g} s, "
          f"{args.rate:g} jobs/s", flush=True)
    rng = random.Random(8)
    submitted: list[str] = []
    start = time.monotonic()
    next_report = 10.0
    first_half: tuple[int, int] | None = None
    try:
        i = 0
        while (elapsed := time.monotonic() - start) < args.seconds:
            job = submit(prefix, i, int(time.time()) + rng.randint(60, 3600))
            i += 1
            if job:
                submitted.append(job)
            if rng.random() < 0.1 and submitted:
                subprocess.run(["scancel", rng.choice(submitted)], capture_output=True)
            if daemon.poll() is not None:
                print(f"the daemon exited ({daemon.returncode}); see {tmp / 'daemon.log'}")
                return 1
            if elapsed >= next_report and db.exists():
                d, w = sizes(db)
                print(f"{elapsed:6.1f}s  jobs submitted {i:5d}  db {d // 1024:6d} KiB  "
                      f"wal {w // 1024:6d} KiB  {counts(db)}", flush=True)
                if first_half is None and elapsed >= args.seconds / 2:
                    first_half = (d, w)
                next_report += 10.0
            time.sleep(1.0 / args.rate)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        log.close()
        if submitted:
            subprocess.run(["scancel", *submitted], capture_output=True)
    end, _ = sizes(db)
    if first_half:
        print(f"database size from {args.seconds / 2:.0f}s to the end: {first_half[0] // 1024}"
              f"..{end // 1024} KiB ({100 * (end - first_half[0]) / first_half[0]:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
