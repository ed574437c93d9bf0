#!/usr/bin/env python3
"""What choosing rlsbatch's option table by sbatch's version costs (a benchmark, not a test).

    SLURM_CONF=... .venv/bin/python benchmarks/bench_sbatch_version.py [-n 40]

In-process: the version read and table choice (`sbatch_options.installed_table()`, a fresh one
per repeat). Whole process: `rlsbatch --test-only` (nothing is submitted) alternated, after 3
uncounted rounds, on three command lines: a plain one; one with `--extra-node-info=1` (an option
every release has: no version read); one with `--ext=1` (it abbreviates options newer releases
add, so rlsbatch reads the version). Prints medians and means.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=40, help="runs per command line (default 40)")
    args = ap.parse_args()
    from slurm_rl.submit import sbatch_options

    reads = []
    for _ in range(20):
        sbatch_options._installed.clear()
        start = time.perf_counter()
        sbatch_options.installed_table()
        reads.append((time.perf_counter() - start) * 1000)
    print(f"sbatch version {sbatch_options.sbatch_version()}: version read + table, in-process "
          f"median {statistics.median(reads):.3f} ms (first {reads[0]:.3f} ms)")

    rlsbatch = str(Path(sys.executable).with_name("rlsbatch"))
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.sh"
        script.write_text("#!/bin/sh\ntrue\n")
        base = [rlsbatch, "--test-only", "-t", "5", "-J", "bench-sbatch-version"]
        lines = {"plain": [*base, str(script)],
                 "--extra-node-info=1 (no read)": [*base, "--extra-node-info=1", str(script)],
                 "--ext=1 (reads the version)": [*base, "--ext=1", str(script)]}
        times: dict[str, list[float]] = {k: [] for k in lines}
        for i in range(args.n + 3):
            for name, argv in lines.items():
                start = time.perf_counter()
                proc = subprocess.run(argv, capture_output=True, text=True, check=False)
                elapsed = (time.perf_counter() - start) * 1000
                if proc.returncode != 0:
                    raise SystemExit(f"{' '.join(argv)}: {proc.stderr.strip()}")
                if i >= 3:
                    times[name].append(elapsed)
    for name, xs in times.items():
        print(f"rlsbatch --test-only {name:<30} median {statistics.median(xs):6.2f} ms   "
              f"mean {statistics.fmean(xs):6.2f} ms   (n={len(xs)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
