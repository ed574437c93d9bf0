"""Write an ITP trace as a Standard Workload Format (SWF) log: the shipped SWF sample.

No log of the Parallel Workloads Archive ships with slurm-rl (nor could one be fetched where it
was made), so `slurm_rl/data/traces/itp-cluster01.swf` is this script's conversion of the
shipped `itp-deadline-cluster01.csv` (MIT, see NOTICE.md there): one SWF row per job, sorted by
submission, times in seconds from the first submission, GPUs as processors, the run time as
given, everything SWF has and ITP does not (wait, CPU time, memory, requested time, user) -1.

    .venv/bin/python benchmarks/itp_to_swf.py itp-deadline-cluster01.csv \
        slurm_rl/data/traces/itp-cluster01.swf
"""

from __future__ import annotations

import argparse
import csv
from importlib import resources
from pathlib import Path


def convert(source: Path, name: str) -> list[str]:
    """The SWF text (header comments, then one line per job) of an ITP CSV."""
    with source.open(newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: (float(r["submission_time"]),
                                                         r["job_id"]))
    start = float(rows[0]["submission_time"])
    lines = [
        "; Version: 2.2",
        f"; Computer: {name} (an ITP GPU cluster; processors are GPUs)",
        "; Note: converted by slurm-rl's benchmarks/itp_to_swf.py from the ElasticFlow ITP",
        ";       traces (microsoft/elasticflow-traces, MIT licence): not an archive log",
        f"; MaxJobs: {len(rows)}",
        f"; MaxRecords: {len(rows)}",
        "; UnixStartTime: -1",
    ]
    for number, row in enumerate(rows, start=1):
        submit = round(float(row["submission_time"]) - start)
        run = round(float(row["duration"]))
        gpus = int(row["num_gpu"])
        # 1 job, 2 submit, 3 wait, 4 run, 5 alloc procs, 6 cpu, 7 mem, 8 req procs, 9 req time,
        # 10 req mem, 11 status, 12 user, 13 group, 14 exe, 15 queue, 16 partition, 17 prev,
        # 18 think time
        fields = [number, submit, -1, run, gpus, -1, -1, gpus, -1, -1, 1, -1, -1, -1, -1, -1,
                  -1, -1]
        lines.append(" ".join(str(f) for f in fields))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="a shipped ITP deadline trace, e.g. itp-deadline-cluster01.csv")
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    source = Path(str(resources.files("slurm_rl") / "data" / "traces" / args.trace))
    lines = convert(source, args.trace.removeprefix("itp-deadline-").removesuffix(".csv"))
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines) - 7} jobs from {args.trace}")


if __name__ == "__main__":
    main()
