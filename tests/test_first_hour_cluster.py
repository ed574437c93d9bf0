"""A new user's first hour on the test cluster: README's Quick look, run as written
after the two lines `make demo` ends with; `explain` showing the GPU count Slurm has now; and
Ctrl-C while slurmctld is unreachable."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from slurm_rl.demo import NEXT_STEPS

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"


def quick_look_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick look", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "README.md's Quick look has no sh block"
    return match.group(1)


def test_readme_quick_look_runs_after_the_demo_hint(tmp_path: Path) -> None:
    block = quick_look_block()
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert tuple(lines[:2]) == NEXT_STEPS  # what make demo prints is what README starts with
    tag = f"ql{uuid.uuid4().hex[:8]}"
    # On a shared cluster: this test's own job name and database, and the daemon narrowed to
    # that job (README's daemon would rank every rlsbatch job on the cluster).
    engine = os.environ.get("SLURM_RL_ENGINE") or "native"
    script = (block.replace("-J quicklook", f"-J {tag}")
              .replace("/tmp/quicklook-%j.out", str(tmp_path / "job-%j.out"))
              .replace("~/quicklook.db", str(tmp_path / "q.db"))
              .replace("deadline --once", f"deadline --once --only-name-prefix {tag}")
              # README shows the default engine's line; run it on the engine this session tests
              .replace("--engine docker", f"--engine {engine}"))
    assert script.count(tag) == 3 and script.count(str(tmp_path)) == 2
    fresh = {"HOME": str(tmp_path), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    # `docker/cluster env` reads the engine (and its directory) from these: the block then
    # points at the cluster this session tests (the docker engine's under `make test`).
    fresh.update({k: os.environ[k] for k in ("SLURM_RL_ENGINE", "SLURM_RL_CLUSTER_DIR")
                  if k in os.environ})
    try:
        proc = subprocess.run(["bash", "-e", "-c", script], cwd=REPO, env=fresh,
                              capture_output=True, text=True, timeout=240)
        status = subprocess.run([str(BIN / "slurm-rl"), "status", "--json", "--db",
                                 str(tmp_path / "q.db")], capture_output=True, text=True,
                                timeout=60)
    finally:
        subprocess.run(["scancel", "-n", tag], capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cycle 1:" in proc.stderr and str(tmp_path / "q.db") in proc.stderr
    # rlsbatch found the daemon's database through $SLURM_RL_DB and predicted the job
    assert "no prediction" not in proc.stderr and "looks feasible" in proc.stderr
    [row] = [ln for ln in proc.stdout.splitlines() if tag in ln]  # status lists the job
    slack_cell = row.split("│")[6].strip()
    assert slack_cell[-1] in "mhd" and not slack_cell.startswith("-"), row
    [job] = [r for r in json.loads(status.stdout)["rows"] if r["name"] == tag]
    assert job["slack_s"] is not None and job["slack_s"] > 0, job  # the deadline looks safe
    assert '"policy": "deadline"' in proc.stdout  # simulate --json


def test_explain_shows_the_gpu_count_slurm_has_now(tmp_path: Path) -> None:
    tag = f"ex{uuid.uuid4().hex[:8]}"
    db = tmp_path / "x.db"
    sub = subprocess.run([str(BIN / "rlsbatch"), "--parsable", "-H", "-J", tag,
                          "--gres=gpu:1", "-o", "/dev/null", "--rl-gpus", "1-3",
                          "--wrap", "sleep 30"], capture_output=True, text=True, check=True)
    job = sub.stdout.strip().split(";")[0]
    try:
        daemon = subprocess.run([str(BIN / "slurm-rl"), "daemon", "--once", "--dry-run",
                                 "--db", str(db), "--only-name-prefix", tag],
                                capture_output=True, text=True, timeout=120)
        assert daemon.returncode == 0, daemon.stderr
        subprocess.run(["scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:2"],
                       check=True, capture_output=True)
        out = subprocess.run([str(BIN / "slurm-rl"), "explain", job, "--db", str(db)],
                             capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "2 GPUs on 1 node(s) now in Slurm (1 when the daemon last stored it)" in first


def test_ctrl_c_while_the_controller_is_down_is_one_line(tmp_path: Path) -> None:
    # The same cluster config, but a controller port nothing listens on: squeue can not reach
    # slurmctld, as when it is down, without touching the shared cluster.
    etc = Path(os.environ["SLURM_CONF"]).parent
    conf_dir = tmp_path / "etc"
    shutil.copytree(etc, conf_dir)
    conf = conf_dir / "slurm.conf"
    text = conf.read_text()
    assert re.search(r"^SlurmctldPort=\d+", text, re.M)
    conf.write_text(re.sub(r"^SlurmctldPort=\d+", "SlurmctldPort=1", text, flags=re.M))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = subprocess.Popen([str(BIN / "slurm-rl"), "daemon", "--interval", "1", "--db",
                             str(tmp_path / "x.db")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        time.sleep(4)  # started, and at least one squeue has failed or is retrying
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the daemon and its squeue
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "Traceback" not in out and " ERROR " not in out, out
    assert "SIGINT: finishing the cycle, then exiting" in out


def test_admin_guide_refusal_check_is_refused_on_the_test_cluster() -> None:
    """docs/admin.md's check of the job_submit.lua plugin, run as written: the test cluster
    loads the plugin, so the line it says must be refused is."""
    text = (REPO / "docs" / "admin.md").read_text()
    [line] = [ln for ln in text.splitlines() if ln.rstrip().endswith("# must be refused")]
    command = line.split("#", 1)[0].strip()
    assert command.startswith("runuser -u nobody -- sbatch --test-only")
    proc = subprocess.run(["bash", "-c", command], cwd="/", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "class 'critical' (c=critical) is not granted to user nobody" in proc.stderr
    assert squeue_names_of("nobody") == []


def squeue_names_of(user: str) -> list[str]:
    proc = subprocess.run(["squeue", "-h", "-u", user, "-o", "%j"], capture_output=True,
                          text=True, timeout=30, check=True)
    return proc.stdout.split()
