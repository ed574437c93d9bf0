"""Hostile jobs in the real queue: the daemon keeps scheduling everyone else, believes
no more than the site granted, and never asks Slurm for more than the user could have.

Poisonous jobs are submitted as root (an operator: job_submit.lua lets operators through, as
a site without the plugin would let everyone) so that the daemon's own defences are what is
tested. Jobs wait with --begin an hour ahead: pending, never running, priority visible.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from cluster_jobs import OUTSIDE, SLURM_RL, Jobs, ensure_users, site_factors, squeue
from sqlalchemy import select

from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, EventKind
from slurm_rl.db.models import Action, DecisionEntry, JobEvent, QuarantinedRecord

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PLAIN, GRANTED = "slurmrl-u1", "slurmrl-crit"
QOS_USER = "slurmrl-qos"  # its association allows the QOS critical
LATER = "now+3600"
SOON = int(time.time()) + 6 * 3600


@pytest.fixture(scope="module")
def users() -> None:
    ensure_users(PLAIN, GRANTED)
    ensure_users(QOS_USER, qos=("critical",))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "slurm-rl.toml"
    cfg.write_text(f'[database]\npath = "{tmp_path / "d.db"}"\n'
                   f'[trust]\ncritical_users = ["{GRANTED}"]\n')
    return cfg


def submit(jobs: Jobs, name: bytes, comment: bytes | None, *, user: str | None = None,
           gres: str = "gpu:1", extra: Sequence[bytes] = (), outside: bool = False) -> str:
    """outside=True: a twin the daemon never sees (cluster_jobs.site_factors)."""
    full = (OUTSIDE.encode() if outside else b"") + jobs.prefix.encode() + name
    argv: list[bytes] = [b"sbatch", b"--parsable", b"-J", full,
                         f"--gres={gres}".encode(), b"-t", b"5", b"-o", b"/dev/null",
                         b"--begin", LATER.encode()]
    if user is not None:
        argv += [b"--uid", user.encode()]
    if comment is not None:
        argv.append(b"--comment=" + comment)
    argv += [*extra, b"--chdir", b"/tmp", b"--wrap", b"sleep 1"]
    out = subprocess.run(argv, capture_output=True, check=True)
    job_id = out.stdout.decode().strip().split(";")[0]
    jobs.ids.append(job_id)
    return job_id


def cycle(config: Path, prefix: str) -> str:
    out = subprocess.run([SLURM_RL, "daemon", "--once", "--config", str(config),
                          "--only-name-prefix", prefix, "--policy", "deadline", "-v"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cycle failed" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    return out.stderr


def rows(db: Path, model: type) -> list:  # type: ignore[type-arg]
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            return list(s.scalars(select(model)))
    finally:
        engine.dispose()


def tag(body: str) -> bytes:
    return ("{rl1:" + body + "}").encode()


POISON_COMMENTS: Sequence[bytes] = tuple(
    b"x" + sep + b"y " + tag(f"d={SOON}") for sep in (
        b"\n", b"\r", b"\v", b"\f", b"\x1e", "\u2028".encode(), "\u0085".encode(),
        b"\x1f", b"\n\x1f\n"))
POISON_NAMES: Sequence[bytes] = (b"n\nl", b"u\x1fs", b"ff\xff", b"\xe2\x80\xa8ls")
POISON_NUMBERS: Sequence[bytes] = (
    tag("s=99999999999999999999999999"), tag("d=99999999999999"),
    tag("d=-5"), b"{rlp:99999999999999999999999/999999999999999999999999}",
    tag(f"d={SOON}") + b"{rlp:5/3@nan}", tag("g=\u0663-\u0664"),
    tag("g=\uff11-\uff12"), tag("b=1e400"), tag(f"d={SOON}" + ",c=critical" * 40))


HOSTILE_EXTRA = ('{"rl":1,"t":1e999,"g":[[0,NaN,1e400,"x",-1,[[[[]]]]]]}', "a\nb\x1fc\x1e",
                 '{"rl":1,"g":' + "[" * 500 + "]" * 500 + "}", "\u2028" * 100)


@pytest.fixture
def hostile_extra() -> Iterator[None]:
    """Garbage in node Extra (what a broken or hostile agent could write), cleared after."""
    for i, text in enumerate(HOSTILE_EXTRA, 1):
        subprocess.run(["scontrol", "update", f"NodeName=node{i}", f"Extra={text}"], check=True)
    try:
        yield
    finally:
        for i in range(1, len(HOSTILE_EXTRA) + 1):
            subprocess.run(["scontrol", "update", f"NodeName=node{i}", "Extra="], check=True)


def test_poisonous_jobs_do_not_stop_the_next_cycle(jobs: Jobs, config: Path,
                                                   hostile_extra: None) -> None:
    poison = [submit(jobs, b"c", c) for c in POISON_COMMENTS]
    poison += [submit(jobs, n, tag(f"d={SOON}")) for n in POISON_NAMES]
    poison += [submit(jobs, b"num", c) for c in POISON_NUMBERS]
    cycle(config, jobs.prefix)
    honest = submit(jobs, b"honest", tag(f"d={SOON}"))
    twin = submit(jobs, b"twin", None, outside=True)
    assert site_factors([honest], twin) == {honest: 0}
    log = cycle(config, jobs.prefix)
    assert site_factors([honest], twin)[honest] > 0, log
    # The poisonous jobs were read as the text they are (or quarantined), never a crash; the
    # out-of-bounds tags bought nothing: no GPU change on any of them.
    shown = squeue(poison, "tres-per-node")
    assert len(shown) == len(poison)
    assert all(v[0] == "gres:gpu:1" for v in shown.values()), shown


def test_forged_and_late_tags_get_no_more_than_the_default(jobs: Jobs, config: Path,
                                                           users: None) -> None:
    dl = f"d={SOON}"
    honest = submit(jobs, b"std", tag(dl), user=PLAIN)
    forged = submit(jobs, b"forged", tag(dl + ",c=critical"), user=PLAIN)
    granted = submit(jobs, b"granted", tag(dl + ",c=critical"), user=GRANTED)
    late = submit(jobs, b"late", None, user=PLAIN)
    twin = submit(jobs, b"twin", None, user=PLAIN, outside=True)
    cycle(config, jobs.prefix)
    # Root (an operator, so the plugin allows it) adds the tag after the daemon saw the job:
    # the same as a user on a site without the plugin.
    subprocess.run(["scontrol", "update", f"JobId={late}",
                    f"Comment={{rl1:d={int(time.time()) + 600},c=critical}}"], check=True)
    assert site_factors([late], twin) == {late: 0}
    cycle(config, jobs.prefix)
    assert site_factors([late], twin) == {late: 0}

    db = config.parent / "d.db"
    ranks: dict[str, int] = {}
    for e in sorted(rows(db, DecisionEntry), key=lambda e: e.id):
        if e.rank is not None:
            ranks[e.job_id] = e.rank
    assert ranks[granted] < ranks[honest] < ranks[forged], ranks
    assert late not in ranks, ranks
    kinds = {(e.job_id, e.kind) for e in rows(db, JobEvent)}
    assert (forged, EventKind.CLASS_DENIED) in kinds
    assert (late, EventKind.INTENT_LATE) in kinds
    assert not any(k == EventKind.CLASS_DENIED for j, k in kinds if j in (granted, honest))


def test_critical_through_a_qos_counts_only_where_slurm_let_the_job_have_it(
        jobs: Jobs, tmp_path: Path, users: None) -> None:
    """[trust] critical_qos: a job that runs under the QOS (slurmctld let it: the user's
    association allows it) is critical; one that only claims the class is standard. The jobs
    are submitted by root for the users (--uid: an operator, so job_submit.lua lets both
    through), as on a site without the plugin."""
    config = tmp_path / "slurm-rl.toml"
    config.write_text(f'[database]\npath = "{tmp_path / "d.db"}"\n'
                      '[trust]\ncritical_qos = ["critical"]\n')
    refused = subprocess.run(["sbatch", "--uid", PLAIN, "--qos=critical", "--begin", LATER,
                              "-o", "/dev/null", "--chdir", "/tmp", "--wrap", "true"],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "Invalid qos specification" in refused.stderr, refused
    dl = f"d={SOON}"
    by_qos = submit(jobs, b"qos", tag(dl + ",c=critical"), user=QOS_USER,
                    extra=[b"--qos=critical"])
    claimed = submit(jobs, b"claimed", tag(dl + ",c=critical"), user=PLAIN)
    assert squeue([by_qos, claimed], "QOS") == {by_qos: ["critical"], claimed: ["normal"]}
    log = cycle(config, jobs.prefix)
    assert "critical_qos ignored" not in log, log
    db = config.parent / "d.db"
    kinds = {(e.job_id, e.kind) for e in rows(db, JobEvent)}
    assert (claimed, EventKind.CLASS_DENIED) in kinds
    assert (by_qos, EventKind.CLASS_DENIED) not in kinds
    ranks = {e.job_id: e.rank for e in rows(db, DecisionEntry) if e.rank is not None}
    assert ranks[by_qos] < ranks[claimed], ranks


@pytest.fixture
def one_node_partition() -> Iterator[None]:
    """MaxNodes=1 on the test partition for one test (slurmctld then lets a user ask for at
    most 4 GPUs); restored afterwards."""
    subprocess.run(["scontrol", "update", "PartitionName=gpu", "MaxNodes=1"], check=True)
    try:
        yield
    finally:
        subprocess.run(["scontrol", "update", "PartitionName=gpu", "MaxNodes=UNLIMITED"],
                       check=True)


def test_a_forged_gpu_range_never_exceeds_what_slurm_allows(jobs: Jobs, config: Path,
                                                            one_node_partition: None) -> None:
    # A model, batch size and step count let the deadline policy predict that more GPUs pay:
    # it widens the job as far as the range and the free GPUs allow.
    work = ",m=resnet50,b=256,s=2000000"
    wide = submit(jobs, b"wide", tag(f"d={SOON},g=1-16{work}"))
    beyond = submit(jobs, b"beyond", tag(f"d={SOON},g=8-16{work}"))
    # What a user could ask: sbatch itself refuses 2 nodes here.
    refused = subprocess.run(["sbatch", "--test-only", "-N", "2", "--gres=gpu:4", "-p", "gpu",
                              "--wrap", "true"], capture_output=True, text=True)
    assert refused.returncode != 0, refused.stderr
    for _ in range(2):
        cycle(config, jobs.prefix)
    shown = squeue([wide, beyond], "tres-per-node,NumNodes")
    per_node = {j: int(v[0].rsplit(":", 1)[1]) for j, v in shown.items()}
    assert all(per_node[j] <= 4 and shown[j][1] == "1" for j in shown), shown
    assert per_node[beyond] == 1, shown  # its range starts above the limit: ignored
    db = config.parent / "d.db"
    # Not even tried: no GPU update the daemon sent (or attempted) exceeds 1 node x 4 GPUs.
    sent = [a.argv for a in rows(db, Action) if a.kind is ActionKind.TRES_PER_NODE]
    assert sent, "the policy widened no job: the check below would prove nothing"
    for argv in sent:
        fields = dict(w.split("=", 1) for w in argv if "=" in w)
        assert int(fields["TresPerNode"].rsplit(":", 1)[1]) <= 4, argv
        assert int(fields.get("NumNodes", "1")) == 1, argv
    kinds = {(e.job_id, e.kind) for e in rows(db, JobEvent)}
    assert {(wide, EventKind.GPU_LIMITED), (beyond, EventKind.GPU_LIMITED)} <= kinds



def test_quarantine_is_recorded_for_a_record_that_cannot_be_read(jobs: Jobs,
                                                                 config: Path) -> None:
    # A comment that stays unreadable after decoding: the daemon logs it once, stores it, and
    # goes on. (With the poll's per-poll record marks, Slurm's output can not be broken by a
    # comment; this drives the quarantine through a job id printed twice by a fake squeue.)
    fake = config.parent / "bin"
    fake.mkdir()
    real = subprocess.run(["which", "squeue"], capture_output=True, text=True,
                          check=True).stdout.strip()
    script = fake / "squeue"
    script.write_text(f"#!/bin/sh\nout=$({real} \"$@\")\nprintf '%s\\n%s\\n' \"$out\" \"$out\"\n")
    script.chmod(0o755)
    honest = submit(jobs, b"honest", tag(f"d={SOON}"))
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    out = subprocess.run([SLURM_RL, "daemon", "--once", "--config", str(config),
                          "--only-name-prefix", jobs.prefix], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "quarantined job" in out.stderr, out.stderr
    stored = rows(config.parent / "d.db", QuarantinedRecord)
    assert any(q.job_id == honest for q in stored), stored


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 320 kB tmpfs: room for the schema, not for a cycle's writes. Unmounted afterwards."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k,mode=0755", "tmpfs",
                           str(mnt)], capture_output=True, text=True)
    assert done.returncode == 0, f"can not mount a tmpfs: {done.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_disk_that_fills_during_a_cycle_is_one_line(jobs: Jobs, small_disk: Path) -> None:
    for i in range(120):
        submit(jobs, f"fill{i}".encode(), b"x" * 700 + b" " + tag(f"d={SOON}"))
    out = subprocess.run([SLURM_RL, "daemon", "--once", "--dry-run", "--db",
                          str(small_disk / "x.db"), "--only-name-prefix", jobs.prefix],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "ERROR" in ln or ln.startswith("Error")]
    assert len(errors) == 1 and "cycle failed" in errors[0] and "disk is full" in errors[0], \
        out.stderr
    assert "Traceback" not in out.stderr, out.stderr


def test_a_policy_that_can_not_be_loaded_falls_back_and_still_orders(jobs: Jobs,
                                                                    config: Path) -> None:
    """A checkpoint that does not load (missing here; a corrupt one alike) costs one ERROR line
    and the fallback orders the queue. (Options the policy refuses are a usage error instead:
    tests/daemon/test_guarded_policy.py.)"""
    j = submit(jobs, b"fb", tag(f"d={SOON}"))
    twin = submit(jobs, b"twin", None, outside=True)
    assert site_factors([j], twin) == {j: 0}
    out = subprocess.run([SLURM_RL, "daemon", "--once", "--config", str(config),
                          "--only-name-prefix", jobs.prefix, "--policy", "rl",
                          "--policy-option", f"checkpoint={config.parent / 'missing.pt'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "policy 'rl' could not be loaded" in errors[0] \
        and "deciding with 'fifo'" in errors[0], out.stderr
    assert "fifo (fallback for rl)" in out.stderr
    assert site_factors([j], twin)[j] > 0  # the fallback's order was applied
