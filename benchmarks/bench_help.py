#!/usr/bin/env python3
"""Whole-process time of `slurm-rl --help` and of each command's `--help` (a benchmark, not a test).

    .venv/bin/python benchmarks/bench_help.py [-n 10] [--commands]

Runs each command line N times after one uncounted warm-up (byte-compiling the modules, as any
pip install does) and prints median and p90 seconds, and the median as a ratio to the bare
start-up of the same interpreter (`python -c pass`), which no command can beat. The target for
`slurm-rl --help` is a median <= 0.3 s on an idle host: the top-level help imports no command
(no numpy, torch, SQLAlchemy or policy). With --commands, every command's own `--help` too
(no command's help imports torch: `train` loads its trainer only to run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.3


def _times(argv: list[str], n: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(argv, capture_output=True, env=env, check=True)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="timed runs per command line")
    parser.add_argument("--commands", action="store_true", help="also each command's --help")
    args = parser.parse_args()
    slurm_rl = str(Path(sys.executable).parent / "slurm-rl")
    lines: list[tuple[str, list[str]]] = [("python -c pass", [sys.executable, "-c", "pass"]),
                                         ("slurm-rl --help", [slurm_rl, "--help"])]
    if args.commands:
        from slurm_rl.cli import _COMMANDS

        lines += [(f"slurm-rl {name} --help", [slurm_rl, name, "--help"])
                  for name in sorted(_COMMANDS)]
    base = 0.0
    print(f"{'command':34s} {'median s':>9s} {'p90 s':>7s} {'x python':>9s}")
    for label, argv in lines:
        times = sorted(_times(argv, args.n))
        median = statistics.median(times)
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        base = base or median
        print(f"{label:34s} {median:9.3f} {p90:7.3f} {median / base:9.1f}")
        if label == "slurm-rl --help":
            verdict = "meets" if median <= TARGET_S else "MISSES"
            print(f"{'':34s} {verdict} the {TARGET_S} s target for the top-level help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
