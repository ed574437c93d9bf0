"""`simulate --jobs-out / --intervals-out` read back: the CSVs add up to the summary.

Times late in a trace (around 10^6 s) with fractions of a second (elastic jobs resized by
`deadline`) are where a short float format loses digits: an interval seems to end before it
starts and the GPU-seconds no longer match the utilisation the summary reports.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from click.testing import CliRunner

from slurm_rl.cli import main

NODES, GPUS = 3, 4


def run(tmp_path: Path) -> tuple[dict[str, float], list[dict[str, str]], list[dict[str, str]]]:
    jobs_out, iv_out = tmp_path / "jobs.csv", tmp_path / "iv.csv"
    result = CliRunner().invoke(main, [
        "simulate", "--trace", "data:itp-deadline-cluster04.csv", "--format", "itp-deadline",
        "--policy", "deadline", "--nodes", str(NODES), "--gpus-per-node", str(GPUS),
        "--window", "3000:150", "--elastic-fraction", "1", "--json",
        "--jobs-out", str(jobs_out), "--intervals-out", str(iv_out)])
    assert result.exit_code == 0, result.output
    with jobs_out.open() as fh:
        jobs = list(csv.DictReader(fh))
    with iv_out.open() as fh:
        ivs = list(csv.DictReader(fh))
    return json.loads(result.output), jobs, ivs


def test_intervals_re_add_to_the_summary(tmp_path: Path) -> None:
    summary, jobs, ivs = run(tmp_path)
    starts = [float(r["start"]) for r in ivs]
    ends = [float(r["end"]) for r in ivs]
    # (the case at stake: fractional times past 10^6 s, which 6 digits can not hold)
    assert sum(1 for t in starts + ends if t > 1e6 and not t.is_integer()) > 10
    assert all(e >= s for s, e in zip(starts, ends, strict=True))

    busy = math.fsum(int(r["gpus"]) * (e - s) for r, s, e in zip(ivs, starts, ends, strict=True))
    assert math.isclose(busy / (NODES * GPUS * summary["makespan_s"]),
                        summary["gpu_utilization"], rel_tol=1e-12)

    # never more GPUs in use than the cluster has (ends before starts at the same instant)
    events = sorted([(s, 1, int(r["gpus"])) for r, s in zip(ivs, starts, strict=True)]
                    + [(e, 0, -int(r["gpus"])) for r, e in zip(ivs, ends, strict=True)])
    used = 0
    for _, _, delta in events:
        used += delta
        assert 0 <= used <= NODES * GPUS

    submit = {r["job_id"]: float(r["submit"]) for r in jobs}
    first = {r["job_id"]: float(r["start"]) for r in jobs}
    last = {r["job_id"]: float(r["end"]) for r in jobs}
    assert len(jobs) == summary["jobs"]
    assert math.isclose(math.fsum(last[j] - submit[j] for j in last) / len(jobs),
                        summary["avg_jct_s"], rel_tol=1e-12)
    assert math.isclose(max(last.values()) - min(submit.values()), summary["makespan_s"],
                        rel_tol=1e-15)
    for r, s, e in zip(ivs, starts, ends, strict=True):  # each run lies within its job's life
        assert first[r["job_id"]] <= s and e <= last[r["job_id"]]
