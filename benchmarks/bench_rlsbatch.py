#!/usr/bin/env python3
"""Whole-process time of `rlsbatch --hold` vs `sbatch --hold` (a benchmark, not a test).

    SLURM_CONF=... .venv/bin/python benchmarks/bench_rlsbatch.py [-n 50] [--intent] [--gpus]
        [--feedback] [--deadline-only]

Submits N held jobs with each command, alternating the two so that both see the same queue
length (sbatch slows as the queue grows), after a few uncounted warm-up runs. Every job gets
one unique name and all of them are cancelled at the end. Prints median / mean / p90 per
command and the ratio of medians; also the bare start-up time of the interpreter rlsbatch runs
under, which is most of the difference. With --feedback, also `rlsbatch --hold --rl-deadline +6h
-t 60` against a database one `slurm-rl daemon --once` cycle has just written (SLURM_RL_DB), and
what the feedback at submission (submit/feedback.py) adds to the median (target <= 50 ms).
With --deadline-only, also `rlsbatch --hold --rl-deadline +6h --rl-model resnet50 --rl-steps
1000` with no CPU request (submit/deadline_only.py: one sinfo call, the site's [sizing] key,
the fewest GPUs predicted from that database) against `rlsbatch --hold -c 1` (the bench
script asks for one CPU, so that the other commands are not deadline-only).

The children run without PYTHONDONTWRITEBYTECODE, so rlsbatch's modules are byte-compiled once
(as they are after any pip install) instead of on every start.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

_JOB_RE = re.compile(r"Submitted batch job (\d+)")


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    m = _JOB_RE.search(proc.stdout)
    return elapsed, m.group(1) if m else ""


def _summary(name: str, xs: list[float]) -> str:
    xs_ms = sorted(x * 1000 for x in xs)
    p90 = xs_ms[min(len(xs_ms) - 1, int(0.9 * len(xs_ms)))]
    return (f"{name:<28} median {statistics.median(xs_ms):7.2f} ms   mean "
            f"{statistics.fmean(xs_ms):7.2f} ms   p90 {p90:7.2f} ms   (n={len(xs_ms)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="submissions per command (default 50)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rlsbatch", default=None,
                    help="rlsbatch to time (default: the one next to this Python)")
    ap.add_argument("--intent", action="store_true",
                    help="also pass --rl-deadline +6h --rl-class critical --rl-steps 1000")
    ap.add_argument("--gpus", action="store_true",
                    help="also pass --rl-gpus 1-4 (adds one sinfo call)")
    ap.add_argument("--feedback", action="store_true",
                    help="also time --rl-deadline (the predicted start/finish from the daemon's "
                         "database) against the same command without it")
    ap.add_argument("--deadline-only", action="store_true",
                    help="also time a deadline and a model alone (held for the daemon to "
                         "size) against a plain rlsbatch --hold -c 1 (implies --feedback's "
                         "database)")
    args = ap.parse_args()

    rlsbatch = args.rlsbatch or str(Path(sys.executable).with_name("rlsbatch"))
    sbatch = shutil.which("sbatch")
    if not sbatch or not Path(rlsbatch).exists():
        raise SystemExit(f"need sbatch on PATH and {rlsbatch}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    name = f"bench-rlsbatch-{uuid.uuid4().hex[:8]}"
    extra = []
    if args.intent:
        extra += ["--rl-deadline", "+6h", "--rl-class", "critical", "--rl-steps", "1000"]
    if args.gpus:
        extra += ["--rl-gpus", "1-4"]

    ids: list[str] = []
    times: dict[str, list[float]] = {"sbatch --hold": [], "rlsbatch --hold": [],
                                     "python -c pass": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench.sh"
        # -c 1: a CPU request, so that a deadline without a GPU request is not the
        # deadline-only form (that one is timed apart, --deadline-only)
        script.write_text("#!/bin/sh\n#SBATCH --time=1 -c 1\n#SBATCH --comment=bench\ntrue\n")
        cmds = {
            "sbatch --hold": [sbatch, "--hold", "-J", name, "-o", "/dev/null", str(script)],
            "rlsbatch --hold": [rlsbatch, "--hold", *extra, "-J", name, "-o", "/dev/null",
                                str(script)],
            "python -c pass": [str(Path(rlsbatch).read_text().splitlines()[0][2:].strip()),
                               "-c", "pass"],
        }
        if args.feedback or args.deadline_only:
            db = Path(tmp) / "daemon.db"
            daemon = subprocess.run(
                [str(Path(rlsbatch).with_name("slurm-rl")), "daemon", "--once", "--dry-run",
                 "--db", str(db), "--only-name-prefix", name], capture_output=True, text=True,
                check=False)
            if daemon.returncode != 0:
                raise SystemExit(f"slurm-rl daemon --once failed: {daemon.stderr.strip()}")
            env["SLURM_RL_DB"] = str(db)
        if args.deadline_only:
            bare = Path(tmp) / "bare.sh"
            bare.write_text("#!/bin/sh\n#SBATCH --time=1\ntrue\n")
            times["rlsbatch --hold -c 1"] = []
            times["... deadline only"] = []
            cmds["rlsbatch --hold -c 1"] = [rlsbatch, "--hold", "-J", name, "-o", "/dev/null",
                                            "-c", "1", str(bare)]
            cmds["... deadline only"] = [rlsbatch, "--hold", "-J", name, "-o", "/dev/null",
                                         "--rl-deadline", "+6h", "--rl-model", "resnet50",
                                         "--rl-steps", "1000", str(bare)]
        if args.feedback:
            times["rlsbatch --hold -t 60"] = []
            times["... --rl-deadline +6h"] = []
            base = [rlsbatch, "--hold", *extra, "-J", name, "-o", "/dev/null", "-t", "60"]
            cmds["rlsbatch --hold -t 60"] = [*base, str(script)]
            cmds["... --rl-deadline +6h"] = [*base, "--rl-deadline", "+6h", str(script)]
        try:
            for _ in range(args.warmup):
                for argv in cmds.values():
                    _, job = _timed(argv, env)
                    ids += [job] if job else []
            for _ in range(args.n):
                for key, argv in cmds.items():
                    elapsed, job = _timed(argv, env)
                    times[key].append(elapsed)
                    ids += [job] if job else []
        finally:
            for i in range(0, len(ids), 200):
                subprocess.run(["scancel", *ids[i:i + 200]], check=False)

    flags = " ".join(extra) or "(no --rl-* flags)"
    print(f"rlsbatch: {rlsbatch}  extra flags: {flags}")
    for key, xs in times.items():
        print(_summary(key, xs))
    sb = statistics.median(times["sbatch --hold"])
    rl = statistics.median(times["rlsbatch --hold"])
    py = statistics.median(times["python -c pass"])
    print(f"median ratio rlsbatch/sbatch: {rl / sb:.2f}  (target <= 1.5)")
    print(f"rlsbatch - sbatch: {(rl - sb) * 1000:.2f} ms, of which interpreter start-up "
          f"{py * 1000:.2f} ms; {len(ids)} jobs submitted and cancelled")
    if args.feedback:
        added = (statistics.median(times["... --rl-deadline +6h"])
                 - statistics.median(times["rlsbatch --hold -t 60"]))
        print(f"feedback at submission (--rl-deadline, daemon database) adds {added * 1000:.2f} "
              "ms to the median (target <= 50 ms)")
    if args.deadline_only:
        added = (statistics.median(times["... deadline only"])
                 - statistics.median(times["rlsbatch --hold -c 1"]))
        print(f"deadline only (sinfo, [sizing], the fewest GPUs from the daemon database) adds "
              f"{added * 1000:.2f} ms to the median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
