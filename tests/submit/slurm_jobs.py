"""Helpers for rlsbatch tests against the real test cluster (fixtures are in conftest.py).

Every test gets its own job name (`rlt-<uuid>`), so tests of other engineers running on the same
cluster never confuse ours, and everything a test submitted is cancelled when it ends.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

RLSBATCH = str(Path(sys.executable).with_name("rlsbatch"))
SLURM_RL = str(Path(sys.executable).with_name("slurm-rl"))
_JOB_RE = re.compile(r"(?:Submitted batch job |^)(\d+)(?:;\S+)?$", re.M)


class Jobs:
    """Submissions of one test: a unique name, and every job id seen (cancelled at the end)."""

    def __init__(self) -> None:
        self.name = f"rlt-{uuid.uuid4().hex[:10]}"
        self.ids: list[str] = []

    def run(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a submission command; remember the job id it printed, if any."""
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
        m = _JOB_RE.search(proc.stdout)
        if m and proc.returncode == 0:
            self.ids.append(m.group(1))
        return proc

    def job_id(self, proc: subprocess.CompletedProcess[str]) -> str:
        m = _JOB_RE.search(proc.stdout)
        assert proc.returncode == 0 and m, (proc.returncode, proc.stdout, proc.stderr)
        return m.group(1)

    def in_queue(self) -> list[str]:
        """Ids of every job (any state) with this test's name."""
        out = subprocess.run(["squeue", "-h", "-t", "all", "-n", self.name, "-o", "%i"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def cancel(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True, check=False)
        subprocess.run(["scancel", "-n", self.name], capture_output=True, check=False)


def show_job(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", "-dd", job_id], capture_output=True,
                          text=True, check=True).stdout
