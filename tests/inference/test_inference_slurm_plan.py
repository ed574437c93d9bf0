"""`slurm-rl plan` inside a real Slurm job on the test cluster (and its errors outside one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main

SLURM_RL = str(Path(sys.executable).with_name("slurm-rl"))


def test_outside_a_job_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    res = CliRunner().invoke(main, ["plan", "vgg"])
    assert res.exit_code == 2 and "not inside a Slurm job" in res.output


@pytest.mark.slurm
def test_plan_inside_a_two_node_job(tmp_path: Path) -> None:
    name = f"rlinf-{uuid.uuid4().hex[:10]}"
    out = tmp_path / "plan.out"
    cmd = (f"{SLURM_RL} plan mobilenet --device-type t4 --bandwidth-gbps 100 --json; "
           f"echo nodelist=$SLURM_JOB_NODELIST")
    sub = subprocess.run(["sbatch", "--parsable", "-N", "2", "-J", name, "-o", str(out),
                          "-t", "5", "--wrap", cmd], capture_output=True, text=True,
                         env=os.environ, check=False)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                               text=True, check=False).stdout.strip()
            if not q or q in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                break
            time.sleep(1)
        else:
            pytest.fail(f"job {job} did not finish in 240 s")
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    lines = out.read_text().splitlines()
    plan = json.loads(lines[0])
    nodelist = lines[-1].removeprefix("nodelist=")
    hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                           text=True, check=True).stdout.split()
    assert plan["nodes"] == hosts and len(hosts) == 2
    assert plan["scheduler"] == "drm-dql" and plan["predicted_latency_s"] > 0
    stages = plan["stages"]
    assert stages[0]["first"] == 0 and stages[-1]["last"] == 56  # mobilenet's 57 layers
    assert all(s["node"] in hosts for s in stages)
