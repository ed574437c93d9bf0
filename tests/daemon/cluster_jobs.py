"""Helpers for the daemon's end-to-end tests on the real test cluster.

Other test sessions share the cluster: every job here carries a name with a per-test prefix,
the daemon runs with `--only-name-prefix` so it touches nothing else, assertions look only at
our own jobs, and every job submitted is cancelled at the end of its test.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_users import ensure_users as ensure_users  # users with their associations

from slurm_rl.core import Intent
from slurm_rl.submit.intent import compose_comment

SLURM_RL = str(Path(sys.executable).with_name("slurm-rl"))
OUTSIDE = "out-"
"""Names starting with this are outside every test's --only-name-prefix."""


@dataclass
class Jobs:
    """Submits and tracks this test's jobs; `cancel_all` at teardown."""

    prefix: str
    ids: list[str] = field(default_factory=list)

    def submit(self, tag: str, *, intent: Intent | None = None, gpus: int = 1, sleep: float = 1,
               minutes: int = 1, hold: bool = False, begin: str | None = None,
               extra: Sequence[str] = (), outside: bool = False) -> str:
        """outside=True: named outside the prefix, so the daemon never sees it (a twin for
        `site_factors`)."""
        name = f"{OUTSIDE}{self.prefix}{tag}" if outside else f"{self.prefix}{tag}"
        args = ["sbatch", "--parsable", "-J", name, f"--gres=gpu:{gpus}",
                "-t", str(minutes), "-o", "/dev/null", "-e", "/dev/null", *extra]
        if intent is not None:
            args.append(f"--comment={compose_comment('', intent)}")
        if hold:
            args.append("-H")
        if begin:
            args.append(f"--begin={begin}")
        args += ["--wrap", f"sleep {sleep}"]
        out = subprocess.run(args, capture_output=True, text=True, check=True)
        job_id = out.stdout.strip().split(";")[0]
        self.ids.append(job_id)
        return job_id

    def cancel_all(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True)


def daemon_argv(db: Path, prefix: str, *args: str, policy: str = "deadline") -> list[str]:
    return [SLURM_RL, "daemon", "--db", str(db), "--only-name-prefix", prefix,
            "--policy", policy, *args]


def run_daemon(db: Path, prefix: str, *args: str, policy: str = "deadline",
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(daemon_argv(db, prefix, "--once", *args, policy=policy),
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out


def squeue(ids: Sequence[str], fields: str) -> dict[str, list[str]]:
    """`squeue -t all -O` for our jobs: id → the other fields (split on '|')."""
    fmt = ",".join(f"{f}:|" for f in ("JobID", *fields.split(",")))
    argv = ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-O", fmt]
    # A busy 2-core host can make one RPC time out (slurmctld answers the next): three tries,
    # then the error with squeue's own words.
    for _ in range(3):
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode == 0:
            break
        time.sleep(1.0)
    else:
        raise AssertionError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
    rows = {}
    for line in out.stdout.splitlines():
        cols = line.split("|")
        rows[cols[0].strip()] = [c.strip() for c in cols[1:-1]]
    return rows


def site_factors(ids: Sequence[str], twin: str) -> dict[str, int]:
    """Each job's SiteFactor as Slurm applies it: its priority minus that of TWIN, a pending job
    of the same user, account, QOS and partition that nothing touches (outside the daemon's
    name prefix), both read in one squeue call.

    A pending job's priority is its SiteFactor plus its association's fair-share factor times
    PriorityWeightFairshare (docker/config/slurm.conf.in). The fair-share part changes as usage
    accrues (every PriorityCalcPeriod), so priorities read at two moments do not compare;
    within one read it is the same for both jobs and cancels. sprio, which shows the site
    factor itself, lists no held or begin-time job."""
    rows = squeue([*ids, twin], "PriorityLong")
    base = int(rows[twin][0])
    return {j: int(rows[j][0]) - base for j in ids}


def sprio_site(ids: Sequence[str]) -> dict[str, int]:
    out = subprocess.run(["sprio", "-h", "-j", ",".join(ids), "-o", "%i %S"],
                         capture_output=True, text=True)
    return {a: int(b) for a, b in (line.split() for line in out.stdout.splitlines())}


def wait_for(predicate, timeout: float, what: str, step: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def policies_decided(db: Path) -> list[str]:
    """The policy of each decision the daemon recorded in `db`, oldest first ([] before the
    first cycle made the table)."""
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT policy FROM decisions ORDER BY id")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def room_on_two_nodes(gpus: int, timeout_s: float = 120.0) -> None:
    """Other sessions share the cluster: wait until two nodes have `gpus` GPUs free (one for
    a job at 1 GPU, one to grow it on: the daemon does not count on the job's own node)."""
    from slurm_rl.slurm.adapter import SlurmAdapter

    deadline = time.monotonic() + timeout_s
    while True:
        free = sorted((n.gpus_free for n in SlurmAdapter().poll_nodes()), reverse=True)
        if len(free) >= 2 and free[1] >= gpus:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the shared cluster stayed too busy: free GPUs {free}")
        time.sleep(2)
