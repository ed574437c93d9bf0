"""Write a time-compressed window of an ITP deadline trace (for the heavy-contention decision
benchmarks): jobs START..START+COUNT by submission time, the gaps between submissions divided
by K, each deadline kept at the same offset from its submission.

    .venv/bin/python benchmarks/compress_trace.py slurm_rl/data/traces/itp-deadline-cluster04.csv \\
        0 3000 10 /tmp/c04-3000-k10.csv
    .venv/bin/slurm-rl simulate --trace /tmp/c04-3000-k10.csv --format itp-deadline \\
        --policy sjf --nodes 128 --json
"""

from __future__ import annotations

import csv
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    src, start, count, k, out = argv[0], int(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    with open(src, newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["submission_time"]))
    rows = rows[start:start + count]
    t0 = float(rows[0]["submission_time"])
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            s, d = float(r["submission_time"]), float(r["deadline"])
            s2 = t0 + (s - t0) / k
            r["submission_time"], r["deadline"] = str(int(s2)), str(int(s2 + d - s))
            w.writerow(r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
