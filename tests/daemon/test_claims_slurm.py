"""Lying about size buys nothing, on the real test cluster, under every shipped policy.

User `liar` first runs one job that claims one step of resnet50 (about 0.15 s) and sleeps 6 s:
the daemon sees it run past its claim and stores the claim against what the run did. Then the
queue (jobs wait with --begin an hour ahead: pending, never running): an honest job of user
`honest`, and the liar's three lies about jobs as long as it:
- `--rl-steps 1` (a steps claim);
- a progress tag at submission, as plain sbatch lets anyone write;
- `scontrol update Comment=` adding an almost-done progress tag to their own pending job.
A user with no record (`fresh`) tells only the two progress lies: those are reports no run
could have made, which catch their owner at once. Each policy then ranks the queue in one
dry-run cycle of the daemon on one database; every lie ranks below the honest job.

Jobs are submitted as root with --uid (an operator: job_submit.lua lets operators through, as
a site without the plugin would let everyone), so that the daemon's own checks are tested.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, ensure_users, squeue
from sqlalchemy import func, select

from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.models import ClaimRecord, DecisionEntry
from slurm_rl.policies import ORACLES, names

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

HONEST, LIAR, FRESH = "slurmrl-honest", "slurmrl-liar", "slurmrl-fresh"
SAME = "{rl1:s=4104,m=resnet50}"  # about 600 s at one GPU, as every job here really is
ALMOST_DONE = "{rlp:4103/4104@100000}"
POLICIES = [n for n in names() if n not in ORACLES]


@pytest.fixture(scope="module")
def users() -> None:
    ensure_users(HONEST, LIAR, FRESH)


def submit(jobs: Jobs, user: str, tag: str, comment: str, *, sleep: int = 600,
           later: bool = True) -> str:
    argv = ["sbatch", "--parsable", "--uid", user, "-J", f"{jobs.prefix}{tag}",
            "--gres=gpu:1", "-t", "60", "-o", "/dev/null", "-e", "/dev/null",
            f"--comment={comment}", "--chdir", "/tmp", "--wrap", f"sleep {sleep}"]
    if later:
        argv.insert(2, "--begin=now+3600")
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    jobs.ids.append(job_id)
    return job_id


def cycle(config: Path, prefix: str, policy: str) -> None:
    out = subprocess.run([SLURM_RL, "daemon", "--once", "--dry-run", "--config", str(config),
                          "--only-name-prefix", prefix, "--policy", policy, "-v"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "cycle failed" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def wait_state(job_id: str, done: bool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = squeue([job_id], "State").get(job_id, ["?"])[0].strip()
        if (state == "COMPLETED") if done else (state == "RUNNING"):
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} never {'completed' if done else 'ran'}: {state}")


def latest_ranks(db: Path) -> dict[str, int]:
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            last = s.scalar(select(func.max(DecisionEntry.decision_id)))
            return {e.job_id: e.rank for e in s.scalars(
                select(DecisionEntry).where(DecisionEntry.decision_id == last))
                if e.rank is not None}
    finally:
        engine.dispose()


def records(db: Path) -> list[tuple[str, str, float, float]]:
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            return [(r.job_id, r.user, r.claimed_s, r.observed_s)
                    for r in s.scalars(select(ClaimRecord))]
    finally:
        engine.dispose()


def test_every_lie_ranks_below_an_honest_job_under_every_policy(
        jobs: Jobs, tmp_path: Path, users: None) -> None:
    db = tmp_path / "claims.db"
    config = tmp_path / "slurm-rl.toml"
    config.write_text(f'[database]\npath = "{db}"\n[claims]\nallowance_s = 1.0\n')

    # The liar's first lie runs, and is held to its claim.
    first = submit(jobs, LIAR, "first", "{rl1:s=1,m=resnet50}", sleep=6, later=False)
    wait_state(first, done=False)
    time.sleep(3)  # past 2 x 0.15 s + the 1 s allowance
    cycle(config, jobs.prefix, "sjf")
    wait_state(first, done=True)
    cycle(config, jobs.prefix, "sjf")
    [(job_id, user, claimed, observed)] = records(db)
    assert (job_id, user) == (first, LIAR)
    assert claimed < 1.0 and observed >= 5.0

    honest = submit(jobs, HONEST, "honest", SAME)
    lies = {
        "steps": submit(jobs, LIAR, "steps", "{rl1:s=1,m=resnet50}"),
        "tag": submit(jobs, LIAR, "tag", SAME + ALMOST_DONE),
        "update": submit(jobs, LIAR, "update", SAME),
        "fresh-tag": submit(jobs, FRESH, "fresh-tag", SAME + ALMOST_DONE),
        "fresh-update": submit(jobs, FRESH, "fresh-update", SAME),
    }
    for name in ("update", "fresh-update"):
        subprocess.run(["scontrol", "update", f"JobId={lies[name]}",
                        f"Comment={SAME}{ALMOST_DONE}"], check=True)
    for policy in POLICIES:
        cycle(config, jobs.prefix, policy)
        ranks = latest_ranks(db)
        assert set(ranks) >= {honest, *lies.values()}, (policy, ranks)
        above = [name for name, job_id in lies.items() if ranks[job_id] <= ranks[honest]]
        assert not above, f"{policy}: {above} rank above the honest job ({ranks})"
