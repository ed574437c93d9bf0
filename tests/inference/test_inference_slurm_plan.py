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
from slurm_rl.inference.profile import SHIPPED_DIR
from slurm_rl.submit.intent import decode_comment
from slurm_rl.submit.tags import INFERENCE_MODELS

SLURM_RL = str(Path(sys.executable).with_name("slurm-rl"))
RLSBATCH = str(Path(sys.executable).with_name("rlsbatch"))


def test_outside_a_job_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    res = CliRunner().invoke(main, ["plan", "vgg"])
    assert res.exit_code == 2 and "not inside a Slurm job" in res.output


def test_rlsbatch_takes_exactly_the_shipped_profiles() -> None:
    assert sorted(INFERENCE_MODELS) == sorted(p.stem for p in SHIPPED_DIR.glob("*.json"))


def test_the_inference_field_survives_the_comment() -> None:
    intent = decode_comment("mine {rl1:c=besteffort,i=mobilenet}").intent
    assert intent is not None and intent.inference == "mobilenet"
    # a path, a space or non-ASCII in i= is no intent at all (what the daemon must ignore)
    for bad in ("a/b.json", "../x", "a b", "mobil\u0435net", "i" * 41, ""):
        assert decode_comment(f"x {{rl1:i={bad}}}").intent is None, bad


def test_no_model_outside_a_job_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    res = CliRunner().invoke(main, ["plan", "--nodes", "node1"])
    assert res.exit_code == 2 and "SLURM_JOB_ID is unset" in res.output


def _wait(job: str) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                           text=True, check=False).stdout.strip()
        if not q or q in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return
        time.sleep(1)
    pytest.fail(f"job {job} did not finish in 240 s")


@pytest.mark.slurm
def test_rlsbatch_inference_job_plans_its_own_model(tmp_path: Path) -> None:
    """`rlsbatch --rl-inference mobilenet` marks the job; `slurm-rl plan` without MODEL reads
    the model from the job's own comment. A second job without the mark gets a usage error."""
    name = f"rlinf-i-{uuid.uuid4().hex[:10]}"
    out, bare_out = tmp_path / "plan.out", tmp_path / "bare.out"
    sub = subprocess.run([RLSBATCH, "--rl-inference", "mobilenet", "--parsable", "-N", "2",
                          "-J", name, "-o", str(out), "-t", "5",
                          "--wrap", f"{SLURM_RL} plan --json"],
                         capture_output=True, text=True, env=os.environ, check=False)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    bare = subprocess.run(["sbatch", "--parsable", "-J", name, "-o", str(bare_out), "-t", "5",
                           "--wrap", f"{SLURM_RL} plan; echo rc=$?"],
                          capture_output=True, text=True, env=os.environ, check=False)
    assert bare.returncode == 0, bare.stderr
    bare_job = bare.stdout.strip().split(";")[0]
    try:
        _wait(job)
        _wait(bare_job)
    finally:
        subprocess.run(["scancel", job, bare_job], capture_output=True, check=False)
    plan = json.loads(out.read_text().splitlines()[0])
    assert plan["model"] == "mobilenet" and len(plan["nodes"]) == 2
    assert plan["stages"][0]["first"] == 0 and plan["stages"][-1]["last"] == 56
    lines = bare_out.read_text().splitlines()
    assert lines[-1] == "rc=2"
    assert any(f"job {bare_job} was not submitted with rlsbatch --rl-inference" in line
               for line in lines), lines


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
    assert plan["scheduler"].startswith("drm-dql") and plan["predicted_latency_s"] > 0
    assert "guard" in plan  # null, or why the request plan was printed instead
    stages = plan["stages"]
    assert stages[0]["first"] == 0 and stages[-1]["last"] == 56  # mobilenet's 57 layers
    assert all(s["node"] in hosts for s in stages)
