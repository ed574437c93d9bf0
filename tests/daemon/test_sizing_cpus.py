"""CPUs of deadline-only jobs (daemon/sizing.py, daemon/cpu_history.py), pure and against the
daemon's database: the owner's CPU limits cap them, the CPUs per GPU a job was sized with are
read back from its action, and [sizing] cpus_from_history takes them from the owner's last
completed run of the model (sacct answered by a FAKE: the test cluster has no accounting; the
real-cluster side is test_sizing_cpus_slurm.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from fake_slurm import FakeSlurm
from sqlalchemy.orm import Session

from slurm_rl.config import SizingConfig
from slurm_rl.core import Intent, JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.daemon.cpu_history import CpuHistory, parse_alloc_tres, previous_run
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.daemon.sizing import (
    Sized,
    Sizer,
    cpus_for,
    cpus_per_gpu_of,
    size_job,
    sized_cpus_per_gpu,
)
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import upsert_jobs
from slurm_rl.slurm.runner import CommandResult

NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))
OPEN = PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)


def job(i: str = "42", **kw: object) -> JobView:
    base: dict[str, object] = dict(
        id=JobId(i), user="alice", partition="gpu", state=JobState.PENDING, submit_time=0.0,
        gpus=0, held=True, intent=Intent(deadline=1e9, gpus_min=1, gpus_max=8, model="resnet50"))
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def size(chosen: int, limit: PartitionLimits = OPEN, settings: SizingConfig | None = None,
         ratio: tuple[int, str] | None = None) -> Sized:
    got = size_job(job(), chosen, settings=settings or SizingConfig(), limits={"gpu": limit},
                   assoc=None, nodes=NODES, cpus_per_gpu=ratio)
    assert isinstance(got, Sized), got
    return got


def test_the_owners_cpu_limits_cap_the_cpus() -> None:
    assert size(4).cpus_per_node == 8  # 2 per GPU, the node's share
    per_node = replace(OPEN, max_cpus_per_node=3)
    s = size(4, per_node)
    assert (s.gpus, s.cpus_per_node) == (4, 3)
    assert "CPUs capped at 3 a node by the owner's CPU limits" in s.why
    per_job = replace(OPEN, max_cpus_per_job=10)
    s = size(8, per_job)
    assert (s.gpus, s.nodes, s.cpus_per_node) == (8, 2, 5)  # 10 a job over 2 nodes
    assert cpus_for(2, 1, 4, NODES, replace(OPEN, max_cpus_per_job=0)) == 1  # never 0
    assert cpus_for(5, 1, 4, NODES, OPEN) is None  # no node has 5 GPUs


def test_cpus_per_gpu_from_an_earlier_run_instead_of_the_site() -> None:
    s = size(2, ratio=(3, "as the owner's run 7 of the model had"))
    assert s.cpus_per_node == 6
    assert s.why.endswith("; 3 CPUs per GPU, as the owner's run 7 of the model had")
    assert size(4, ratio=(3, "x")).cpus_per_node == 8  # still at most the node's 8


def test_the_cpus_per_gpu_a_job_was_sized_with_are_read_back_from_its_action() -> None:
    s = Sized(job_id=JobId("42"), gpus=6, per_node=3, nodes=2, cpus_per_node=7, why="")
    argv = ("scontrol", *" ; ".join(s.lines(1)).split(" "))
    assert cpus_per_gpu_of(argv) == 2  # 7 CPUs for 3 GPUs: 2 each (floor)
    assert cpus_per_gpu_of(("scontrol", "update", "JobId=1", "TresPerNode=gres:gpu:0",
                            "MinCPUsNode=4")) is None
    assert cpus_per_gpu_of(("scontrol", "update", "MinCPUsNode=\u0664",
                            "TresPerNode=gres:gpu:2")) is None
    assert cpus_per_gpu_of(("scontrol", "release", "42")) is None


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        yield s
    engine.dispose()


def test_only_a_done_size_release_marks_the_cpus_as_the_daemons(session: Session) -> None:
    upsert_jobs(session, [job("7"), job("8")], now=1000.0)
    session.commit()
    sized = [Sized(job_id=JobId(i), gpus=2, per_node=2, nodes=1, cpus_per_node=6, why="")
             for i in ("7", "8")]
    fake = FakeSlurm()
    sizer = Sizer(fake, SizingConfig(), clock=lambda: 1000.0)
    assert sizer._run(session, sized[0], 1, cycle_id=1, decision_id=None)
    fake.fail_on = "JobId=8"
    assert not sizer._run(session, sized[1], 1, cycle_id=1, decision_id=None)
    assert sized_cpus_per_gpu(session, [JobId("7"), JobId("8"), JobId("9")]) == {JobId("7"): 3}


class FakeSacct:
    """A FAKE runner for unit tests: `sacct -nP -X -j ID -o AllocTRES` answered from `alloc`
    (the documented format); anything else fails as on a cluster without accounting."""

    def __init__(self, alloc: dict[str, str]) -> None:
        self.alloc = alloc
        self.calls: list[tuple[str, ...]] = []

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            input: str | None = None) -> CommandResult:
        argv = tuple(args)
        self.calls.append(argv)
        if argv[0] == "sacct" and argv[argv.index("-j") + 1] in self.alloc:
            return CommandResult(args=argv, returncode=0, duration_s=0.0, stderr="",
                                 stdout=self.alloc[argv[argv.index("-j") + 1]] + "\n")
        return CommandResult(args=argv, returncode=1, stdout="", duration_s=0.0,
                             stderr="Slurm accounting storage is disabled\n")


def test_alloc_tres_parsing() -> None:
    assert parse_alloc_tres("billing=12,cpu=12,gres/gpu=4,mem=16G,node=1\n") == (12, 4)
    assert parse_alloc_tres("billing=8,cpu=8,mem=4G,node=1") == (8, None)  # gpu not tracked
    assert parse_alloc_tres("") is None
    assert parse_alloc_tres("cpu=4\ncpu=8\n") is None  # one job, one line
    assert parse_alloc_tres("cpu=\u0664,gres/gpu=1") is None


def finished(i: str, *, user: str = "alice", model: str = "resnet50", end: float,
             state: JobState = JobState.COMPLETED, gpus: int = 2) -> JobView:
    return job(i, user=user, state=state, gpus=gpus, held=False, end_time=end,
               intent=Intent(model=model, gpus_min=1, gpus_max=8))


def test_the_owners_last_completed_run_of_the_model(session: Session) -> None:
    upsert_jobs(session, [
        finished("10", end=100.0), finished("11", end=300.0),
        finished("12", end=400.0, state=JobState.FAILED),   # not completed
        finished("13", end=500.0, user="bob"),              # not the owner
        finished("14", end=600.0, model="bert"),            # another model
        finished("15", end=700.0, gpus=0),                  # held no GPUs
    ], now=1000.0)
    session.commit()
    assert previous_run(session, job()) == (JobId("11"), 2)
    assert previous_run(session, job(intent=Intent(deadline=1e9, gpus_min=1))) is None

    fake = FakeSacct({"11": "billing=12,cpu=12,gres/gpu=2,mem=16G,node=1"})
    history = CpuHistory(fake)
    assert history.cpus_per_gpu(session, job()) == (6, JobId("11"))
    assert history.cpus_per_gpu(session, job("43")) == (6, JobId("11"))
    assert len(fake.calls) == 1  # a finished job's allocation is asked for once
    # gres/gpu not tracked by accounting: the GPUs the daemon saw the job hold.
    assert CpuHistory(FakeSacct({"11": "cpu=5,node=1"})).cpus_per_gpu(session, job()) == (
        2, JobId("11"))
    # Accounting off (the test cluster's sacct): no answer, the site's value applies.
    off = FakeSacct({})
    assert CpuHistory(off).cpus_per_gpu(session, job()) is None


def test_a_sizer_with_history_sizes_with_the_earlier_runs_cpus(session: Session) -> None:
    from slurm_rl.core import ClusterSnapshot, Decision, JobOrder

    upsert_jobs(session, [finished("11", end=300.0)], now=1000.0)
    session.commit()
    sizer = Sizer(FakeSacct({"11": "cpu=6,gres/gpu=2"}), SizingConfig(cpus_from_history=True))
    assert sizer.history is not None
    found = sizer.history.cpus_per_gpu(session, job())
    assert found == (3, JobId("11"))
    sizer.ratios = {JobId("42"): (found[0], "from run 11")}  # what `awaiting` keeps
    decision = Decision(policy="t", order=(JobOrder(job_id=JobId("42"), rank=0, gpus=2),))
    plan = sizer.plan(decision, [job()], ClusterSnapshot(time=1000.0, jobs=(job(),),
                                                         nodes=NODES),
                      limits={"gpu": OPEN}, assoc=None)
    (sized, _), = plan.sized
    assert (sized.gpus, sized.cpus_per_node) == (2, 6)
    assert Sizer(FakeSlurm(), SizingConfig()).history is None  # off by default
