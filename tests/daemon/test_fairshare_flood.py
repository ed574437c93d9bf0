"""Fair share between users on the real cluster: one user floods managed critical jobs, another
submits one plain sbatch job; with the daemon running, the plain job starts no later than it
does under Slurm alone (docs/daemon.md, "Fair share between users").

The flood user (FLOOD) has used the cluster more than the plain user (PLAIN), so Slurm alone
puts PLAIN's job ahead of FLOOD's pending ones; the daemon gives every managed job a SiteFactor
of up to its band's top, which must stay below what the fair-share difference is worth.

Both users are this test's own (in the account rl, FLOOD with the QOS critical, which [trust]
grants the class critical here), so their usage is only what this test makes: FLOOD's grows
by 300 short jobs a run, PLAIN's by two one-second jobs. Everything runs on the node with the
most free GPUs (4 GPUs: 4 flood jobs at once, 300 cannot), so other sessions' tests keep the
other three nodes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest
from cluster_jobs import Jobs, daemon_argv, ensure_users, sprio_site, squeue, wait_for

from slurm_rl.core import Intent, ServiceClass
from slurm_rl.daemon.fairshare import FAIRSHARE_MARGIN
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.priority import parse_priority_settings
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FLOOD, PLAIN = "slurmrl-flood", "slurmrl-fsplain"
FLOOD_JOBS = 300
FLOOD_SLEEP_S = 1
INTERVAL_S = 1.0
"""The daemon's cycle: its order reaches Slurm at most this long after the queue changed."""
TOLERANCE_S = FLOOD_SLEEP_S + INTERVAL_S + 1
"""One scheduling cycle of this workload, and Slurm's whole-second times: PLAIN's job starts
when a GPU frees, and the node's four flood jobs end together, once a flood job's run (1 s)
plus the time slurmctld takes to fill the GPUs again; the daemon acts once per interval (1 s);
SubmitTime and StartTime are whole seconds (1 s)."""
GIVE_UP_S = 30
"""How long past Slurm alone's wait the daemon phase waits before it fails (with the daemon's
full band over a fair share of 100, PLAIN's job waited for the whole flood: 300 / 4 runs)."""


@pytest.fixture(scope="module")
def users() -> None:
    ensure_users(PLAIN)
    ensure_users(FLOOD, qos=("critical",))


def free_node() -> str:
    nodes = sorted(SlurmAdapter().poll_nodes(), key=lambda n: (-n.gpus_free, n.name))
    return nodes[0].name


def sshare() -> dict[str, tuple[float, float]]:
    """{user: (RawUsage, FairShare)} for our two users."""
    out = subprocess.run(["sshare", "-n", "-P", "-a", "-u", f"{FLOOD},{PLAIN}",
                          "-o", "User,RawUsage,FairShare"], capture_output=True, text=True,
                         check=True).stdout
    rows = (line.split("|") for line in out.splitlines())
    return {r[0].strip(): (float(r[1] or 0), float(r[2] or 0)) for r in rows
            if len(r) == 3 and r[0].strip()}


def fairshare_weight() -> int:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         check=True).stdout
    return parse_priority_settings(out).weight_fairshare


def sbatch(jobs: Jobs, name: str, user: str, node: str, *, sleep: float,
           extra: tuple[str, ...] = ()) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--uid", user, "-J", name, "-w", node,
                          "--gres=gpu:1", "-t", "2", "-o", "/dev/null", "--chdir", "/tmp",
                          *extra, "--wrap", f"sleep {sleep}"],
                         capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    jobs.ids.append(job_id)
    return job_id


def flood(jobs: Jobs, name: str, node: str) -> list[str]:
    """FLOOD_JOBS managed critical jobs (what `rlsbatch --rl-class critical --qos critical`
    submits: the same comment), in parallel: sbatch takes 4-28 ms each on this host."""
    extra = ("--qos=critical",
             f"--comment={compose_comment('', Intent(service_class=ServiceClass.CRITICAL))}")
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _: sbatch(jobs, name, FLOOD, node, sleep=FLOOD_SLEEP_S,
                                              extra=extra), range(FLOOD_JOBS)))


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def others_started(node: str, ours: set[str], since: str, until: str) -> int:
    """Jobs of other sessions that started on NODE in [SINCE, UNTIL] (ISO times): they took
    GPUs PLAIN's job was waiting for (root's jobs have a higher fair-share factor)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-w", node, "-o", "%j|%S"],
                         capture_output=True, text=True).stdout
    rows = (line.split("|") for line in out.splitlines() if "|" in line)
    return sum(1 for name, start in rows if name not in ours and since <= start <= until)


def plain_wait(jobs: Jobs, name: str, node: str, flood_ids: list[str], ours: set[str],
               limit_s: float) -> tuple[float | None, int, int]:
    """Submit PLAIN's job; (its wait from SubmitTime to StartTime, or None if it had not
    started within LIMIT_S; the flood jobs pending at its submission that started first;
    other sessions' jobs that started on the node meanwhile)."""
    pending = {j for j, r in squeue(flood_ids, "State").items() if r[0] == "PENDING"}
    plain = sbatch(jobs, name, PLAIN, node, sleep=1)
    deadline = time.monotonic() + limit_s
    while True:
        row = squeue([plain], "State,SubmitTime,StartTime")[plain]
        if row[0] not in ("PENDING", "CONFIGURING"):
            break
        if time.monotonic() > deadline:
            return None, len(pending), 0
        time.sleep(0.25)
    start = row[2]
    rows = squeue(sorted(pending), "State,StartTime")  # a pending job's StartTime: a guess
    ahead = sum(1 for r in rows.values() if r[0] != "PENDING" and r[1] < start)
    others = others_started(node, ours, row[1], start)
    return seconds(start) - seconds(row[1]), ahead, others


def cancel(name: str) -> None:
    """Every job of this name, any user (as root); then wait until none is left."""
    subprocess.run(["scancel", "-n", name], capture_output=True)
    wait_for(lambda: not subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"],
                                        capture_output=True, text=True).stdout.strip(),
             60, f"the jobs named {name} to leave the queue")


@pytest.fixture
def cleanup(jobs: Jobs) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        subprocess.run(["scancel", "-n", name], capture_output=True)


def test_a_flood_of_managed_jobs_does_not_delay_another_users_plain_job(
        jobs: Jobs, tmp_path: Path, users: None, cleanup: list[str]) -> None:
    weight = fairshare_weight()
    node = free_node()
    warm, flood_name, plain_name = (f"{jobs.prefix}{t}" for t in ("warm", "flood", "plain"))
    cleanup += [warm, flood_name, plain_name]
    # FLOOD must have used the cluster more than PLAIN; usage counts at every
    # PriorityCalcPeriod (1 min), so a first run waits for one.
    if sshare().get(FLOOD, (0.0, 0.0))[0] <= 0:
        sbatch(jobs, warm, FLOOD, node, sleep=90)
        wait_for(lambda: sshare().get(FLOOD, (0.0, 0.0))[0] > 0, 75,
                 f"{FLOOD}'s usage to count (PriorityCalcPeriod)", step=2)
        cancel(warm)

    # Slurm alone.
    ours = {flood_name, plain_name}
    ids = flood(jobs, flood_name, node)
    share = sshare()
    gap = share[PLAIN][1] - share[FLOOD][1]
    assert gap > 1 / FAIRSHARE_MARGIN, f"fair share does not separate the users: {share}"
    alone, ahead_alone, _ = plain_wait(jobs, plain_name, node, ids, ours, 120)
    assert alone is not None, "PLAIN's job did not start under Slurm alone within 120 s"
    cancel(flood_name)
    cancel(plain_name)

    # The same submissions with the daemon running its cycles; measured once more if another
    # test run's jobs took the node's GPUs while PLAIN's job waited.
    config = tmp_path / "slurm-rl.toml"
    config.write_text('[trust]\ncritical_qos = ["critical"]\n')
    limit = alone + TOLERANCE_S + GIVE_UP_S
    for attempt in range(2):
        log = (tmp_path / f"daemon{attempt}.log").open("w")
        proc = subprocess.Popen(daemon_argv(tmp_path / f"d{attempt}.db", jobs.prefix, "--config",
                                            str(config), "--interval", str(INTERVAL_S)),
                                stderr=log, env={**os.environ})
        try:
            ids = flood(jobs, flood_name, node)

            def ranked(ids: list[str] = ids) -> dict[str, int] | None:
                sites = sprio_site(ids)  # the flood's pending jobs, eligible to start
                return sites if sites and all(v > 0 for v in sites.values()) else None

            sites = wait_for(ranked, 30, "the daemon to rank the flood")
            managed, ahead, others = plain_wait(jobs, plain_name, node, ids, ours, limit)
            assert proc.poll() is None, (tmp_path / f"daemon{attempt}.log").read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            cancel(flood_name)
            cancel(plain_name)
        if (managed is not None and managed <= alone + TOLERANCE_S) or not others:
            break
    with_daemon = (f"had not started after {limit:.0f} s with the daemon ({ahead} flood jobs "
                   "pending at its submission)" if managed is None else
                   f"waited {managed:.0f} s with the daemon ({ahead} flood jobs first, "
                   f"{others} jobs of other sessions started on {node} meanwhile)")
    detail = (f"PLAIN's job waited {alone:.0f} s under Slurm alone ({ahead_alone} flood jobs "
              f"first) and {with_daemon}; PriorityWeightFairShare={weight}, SiteFactor up to "
              f"{max(sites.values())}, (RawUsage, FairShare) {share}")
    assert managed is not None and managed <= alone + TOLERANCE_S, detail
    assert max(sites.values()) <= weight // FAIRSHARE_MARGIN, detail
    print(detail)
