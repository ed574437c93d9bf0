"""Association and QOS GPU limits on the real test cluster: Slurm enforces them on the job's
owner, and the daemon, acting as operator, never gives a job more GPUs than they allow.

User `slurmrl-capped` has an association with `MaxTRES=gres/gpu=2` (set here, reset to -1 at
the end, also on failure); `slurmrl-uncapped`, the control, has none. Measured on 22.05:
- the owner asking for 4 GPUs is refused at submission under a QOS with `DenyOnLimit`
  ("Job violates accounting/QOS policy", reason AssocMaxGRESPerJob); under the QOS normal the
  job is accepted and waits with that reason;
- an operator's `scontrol update TresPerNode=gres:gpu:4` of the owner's 2-GPU job is accepted
  (operators skip the owner's checks) and the job then waits, with that reason, for good: a
  daemon that ignored the limit would leave the job stuck rather than run it wider.
Then both users submit with rlsbatch the same job, `--rl-gpus 1-4` and a tight deadline, while
the cluster has GPUs free, and `slurm-rl daemon --policy deadline` runs cycles: the control's
job gets more than 2 GPUs, the capped user's job never more than 2 (in every update the daemon
recorded and in Slurm), and it runs at 2. Likewise a job under the QOS `slurmrl-qoscap`
(`MaxTRESPerJob=gres/gpu=3`, set here and reset at the end) gets 3 where the same job under the
QOS normal gets 4, and runs at 3 (at 4 it would wait for good, reason QOSMaxGRESPerJob).

Slurm limits GPUs only where accounting counts them (`AccountingStorageTRES=gres/gpu` in
slurm.conf: `sacctmgr show tres` then lists gres/gpu); on a cluster without it no GPU limit can
be set (sacctmgr: "no TRES known by type gres/gpu") and this module is skipped with that
reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import ensure_users, room_on_two_nodes, run_daemon, squeue, wait_for
from cluster_users import accounting
from sqlalchemy import select

from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, EventKind
from slurm_rl.db.models import Action, ActionJob, JobEvent
from slurm_rl.submit.cli import make_submission

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CAPPED, CONTROL = "slurmrl-capped", "slurmrl-uncapped"
DENY_QOS = "slurmrl-capdeny"
"""A QOS with Flags=DenyOnLimit that only CAPPED may use: limits refuse at submission."""
QOS_CAP = "slurmrl-qoscap"
"""A QOS with MaxTRESPerJob=gres/gpu=3 (while this module runs) that CONTROL may use."""
CAP, QOS_GPUS = 2, 3
REFUSED = "Job violates accounting/QOS policy"
REASON = "AssocMaxGRESPerJob"


def _sacctmgr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True,
                          timeout=60)


def _set_cap(value: int) -> None:
    out = _sacctmgr("modify", "user", "where", f"name={CAPPED}", "set",
                    f"MaxTRES=gres/gpu={value}")
    # "Nothing modified": it already was; anything else is a failure of this test's setup.
    assert out.returncode == 0 or "Nothing modified" in out.stdout + out.stderr, \
        f"sacctmgr: {out.stdout}{out.stderr}"


def _set_qos_cap(value: int) -> None:
    out = _sacctmgr("modify", "qos", "where", f"name={QOS_CAP}", "set",
                    f"MaxTRESPerJob=gres/gpu={value}")
    assert out.returncode == 0 or "Nothing modified" in out.stdout + out.stderr, \
        f"sacctmgr: {out.stdout}{out.stderr}"


@pytest.fixture(scope="module")
def capped(slurm_cluster: dict[str, str]) -> Iterator[None]:
    if not accounting():
        pytest.skip("the test cluster runs without slurmdbd: no associations")
    tres = subprocess.run(["sacctmgr", "-nP", "show", "tres", "format=Type,Name"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    if "gres|gpu" not in tres.splitlines():
        pytest.skip("accounting does not count GPUs here (slurm.conf has no "
                    "AccountingStorageTRES=gres/gpu), so no association can limit them")
    out = _sacctmgr("add", "qos", DENY_QOS, "Flags=DenyOnLimit")
    assert out.returncode == 0 or "Nothing new" in out.stdout + out.stderr, out.stdout
    out = _sacctmgr("add", "qos", QOS_CAP)
    assert out.returncode == 0 or "Nothing new" in out.stdout + out.stderr, out.stdout
    ensure_users(CAPPED, qos=(DENY_QOS,))
    ensure_users(CONTROL, qos=(QOS_CAP,))
    try:
        _set_cap(CAP)
        _set_qos_cap(QOS_GPUS)
        yield
    finally:
        _set_cap(-1)
        _set_qos_cap(-1)


@pytest.fixture
def made() -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the test users may run sbatch in."""
    work = tmp_path_factory.mktemp("assoc-limits")
    work.chmod(0o1777)
    return work


def as_user(user: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", "env",
                           f"SLURM_CONF={os.environ['SLURM_CONF']}", *argv],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def sbatch_as(user: str, cwd: Path, made: list[str], *options: str
              ) -> subprocess.CompletedProcess[str]:
    out = as_user(user, ["sbatch", "--parsable", "-o", "/dev/null", "-t", "2", *options,
                         "--wrap", "sleep 120"], cwd)
    if out.returncode == 0:
        made.append(out.stdout.strip().split(";")[0])
    return out


def reason_becomes(job_id: str, reason: str, timeout: float = 60.0) -> list[str]:
    """The job's state, reason and GPUs per node once its reason is REASON."""
    def waiting() -> list[str] | None:
        row = squeue([job_id], "State,Reason,tres-per-node")[job_id]
        return row if row[1] == reason else None

    return wait_for(waiting, timeout, f"job {job_id} to wait for {reason}")


def test_slurm_refuses_the_owner_more_gpus_than_the_association_allows(
        capped: None, workdir: Path, made: list[str]) -> None:
    # slurmctld learns of the limit from slurmdbd within a moment: until it does, the job is
    # accepted (and cancelled here), then refused.
    deadline = time.monotonic() + 30
    while True:
        out = sbatch_as(CAPPED, workdir, made, f"--qos={DENY_QOS}", "-H", "--gres=gpu:4")
        if out.returncode != 0 or time.monotonic() > deadline:
            break
        subprocess.run(["scancel", made.pop()], capture_output=True)
        time.sleep(1)
    assert out.returncode == 1, f"Slurm accepted {CAPPED}'s job for 4 GPUs: {out.stdout}"
    assert REFUSED in out.stderr and REASON in out.stderr, out.stderr
    # Within the limit it is accepted.
    two = sbatch_as(CAPPED, workdir, made, f"--qos={DENY_QOS}", "-H", "--gres=gpu:2")
    assert two.returncode == 0, two.stderr
    # The control user asks for 4 and is accepted.
    control = sbatch_as(CONTROL, workdir, made, "-H", "--gres=gpu:4")
    assert control.returncode == 0, control.stderr

    # Under the QOS normal the same request is accepted and waits for the limit.
    wide = sbatch_as(CAPPED, workdir, made, "--gres=gpu:4")
    assert wide.returncode == 0, wide.stderr
    assert reason_becomes(made[-1], REASON)[0] == "PENDING"

    # An operator may give the owner's job 4 GPUs (no check at the update); the job then waits
    # for the limit, as the 4-GPU submission does: it never runs wider than allowed.
    later = sbatch_as(CAPPED, workdir, made, "--begin=now+3600", "--gres=gpu:2")
    assert later.returncode == 0, later.stderr
    job = made[-1]
    subprocess.run(["scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:4"], check=True)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    assert reason_becomes(job, REASON) == ["PENDING", REASON, "gres:gpu:4"]


def _submit_range_job(user: str, name: str, cwd: Path, made: list[str], *options: str) -> str:
    """rlsbatch's submission (its sbatch command line, made for USER) of a job that can use
    1-4 GPUs and has a deadline 1-GPU speed would miss; not eligible for an hour, so that
    the daemon sizes it while it waits."""
    args = ["--rl-gpus", "1-4", "--rl-deadline", "+20m", "--rl-model", "resnet50",
            "--rl-steps", "40000", "--begin=now+3600", "--parsable", "-t", "5",
            "-o", "/dev/null", "-e", "/dev/null", "-J", name, *options, "--wrap", "sleep 300"]
    plan = make_submission(args, os.environ, lambda: b"", submitter=user)
    assert "--gres=gpu:1" in plan.argv, plan.argv  # rlsbatch starts a range at its minimum
    out = as_user(user, plan.argv, cwd)
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    made.append(job_id)
    return job_id


def _total_gpus(argv: list[str], nodes: int) -> int:
    fields = dict(w.split("=", 1) for w in argv if "=" in w)
    per_node = int(fields["TresPerNode"].rsplit(":", 1)[1])
    return per_node * int(fields.get("NumNodes", nodes))


def _recorded(db: Path, job_id: str) -> tuple[list[list[str]], set[EventKind]]:
    """The GPU updates the daemon sent (or tried) for JOB_ID, and the kinds of its events."""
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            sent = [list(a.argv) for a in s.scalars(
                select(Action).join(ActionJob, ActionJob.action_id == Action.id)
                .where(ActionJob.job_id == job_id).order_by(Action.id))
                if a.kind is ActionKind.TRES_PER_NODE]
            kinds = set(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id)))
            return sent, kinds
    finally:
        engine.dispose()


def _per_job(tres_per_node: str, nodes: str) -> int:
    m = re.fullmatch(r"gres:gpu:([0-9]+)", tres_per_node)
    assert m, tres_per_node
    return int(m.group(1)) * int(nodes)


def test_the_daemon_never_sizes_a_job_past_its_association_limit(
        capped: None, workdir: Path, made: list[str], tmp_path: Path) -> None:
    room_on_two_nodes(4)
    prefix = f"al{uuid.uuid4().hex[:6]}-"
    jobs = {CAPPED: _submit_range_job(CAPPED, f"{prefix}capped", workdir, made),
            CONTROL: _submit_range_job(CONTROL, f"{prefix}control", workdir, made)}
    ids = list(jobs.values())
    db = tmp_path / "d.db"
    for _ in range(2):
        run_daemon(db, prefix)
    pending = squeue(ids, "State,tres-per-node,NumNodes")
    assert all(row[0] == "PENDING" for row in pending.values()), pending
    gpus = {user: _per_job(*pending[j][1:]) for user, j in jobs.items()}
    assert gpus[CONTROL] > CAP, f"the policy gave the control job only {gpus}: no test of a cap"
    assert gpus[CAPPED] == CAP, gpus

    # Eligible now: the jobs start at the counts the daemon gave them, another cycle on the way.
    subprocess.run(["scontrol", "update", f"JobId={','.join(ids)}", "StartTime=now"],
                   check=True)
    run_daemon(db, prefix)
    def both_running() -> dict[str, list[str]] | None:
        rows = squeue(ids, "State,tres-per-node,NumNodes")
        return rows if all(v[0] == "RUNNING" for v in rows.values()) else None

    rows = wait_for(both_running, 90, "both jobs to run")
    running = {user: _per_job(*rows[j][1:]) for user, j in jobs.items()}
    assert running[CAPPED] == CAP and running[CONTROL] > CAP, running

    sent, kinds = _recorded(db, jobs[CAPPED])
    assert sent, "the daemon sent no GPU update for the capped job"
    assert all(_total_gpus(argv, 1) <= CAP for argv in sent), sent
    assert EventKind.GPU_LIMITED in kinds, kinds  # its range 1-4 was capped at 2
    sent, kinds = _recorded(db, jobs[CONTROL])
    assert any(_total_gpus(argv, 1) > CAP for argv in sent), sent
    assert EventKind.GPU_LIMITED not in kinds, kinds


def test_the_daemon_never_sizes_a_job_past_its_qos_limit(
        capped: None, workdir: Path, made: list[str], tmp_path: Path) -> None:
    # The same job twice from the control user, one under the QOS that allows 3 GPUs a job.
    room_on_two_nodes(4)
    prefix = f"aq{uuid.uuid4().hex[:6]}-"
    plain = _submit_range_job(CONTROL, f"{prefix}plain", workdir, made)
    under = _submit_range_job(CONTROL, f"{prefix}qos", workdir, made, f"--qos={QOS_CAP}")
    db = tmp_path / "d.db"
    for _ in range(2):
        run_daemon(db, prefix)
    rows = squeue([plain, under], "State,tres-per-node,NumNodes")
    gpus = {j: _per_job(*rows[j][1:]) for j in (plain, under)}
    assert gpus[plain] > QOS_GPUS, f"the policy gave the plain job only {gpus}: no test of a cap"
    assert gpus[under] == QOS_GPUS, gpus
    sent, kinds = _recorded(db, under)
    assert sent and all(_total_gpus(argv, 1) <= QOS_GPUS for argv in sent), sent
    assert EventKind.GPU_LIMITED in kinds, kinds

    # Eligible now: it runs at 3 (a 4 would wait for good, reason QOSMaxGRESPerJob).
    subprocess.run(["scontrol", "update", f"JobId={plain},{under}", "StartTime=now"],
                   check=True)

    def both_running() -> dict[str, list[str]] | None:
        rows = squeue([plain, under], "State,tres-per-node,NumNodes")
        return rows if all(v[0] == "RUNNING" for v in rows.values()) else None

    rows = wait_for(both_running, 90, "both jobs to run")
    assert _per_job(*rows[under][1:]) == QOS_GPUS, rows
