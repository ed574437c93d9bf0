"""`estimates.predictions_stand` and `StandingClaims` (which running jobs' predictions are
their estimates, for every running job at once) give the answers of `claims_stand` asked job
by job: on hand-built snapshots of every kind of claim, and in the simulator, where the
running set is shared between snapshots and its fixed parts are kept."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_builders import NOW, nodes, running

from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobView, Progress
from slurm_rl.policies.estimates import StandingClaims, claims_stand, predictions_stand
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator


def reference(s: ClusterSnapshot) -> list[bool]:
    return [p is not None and claims_stand(v)
            for v, p in zip(s.running, s.running_predicted, strict=True)]


MODELS = st.sampled_from([None, "resnet50", "ResNet50", "bert", "no-such-model", ""])


@st.composite
def running_job(draw: st.DrawFn, i: int) -> JobView:
    attained = draw(st.sampled_from([0.0, 1.0, 30.0, 300.0, 1e5]))
    progress = draw(st.none() | st.builds(
        Progress, steps_done=st.integers(0, 10**7), steps_total=st.none() | st.just(10**7),
        rate=st.none() | st.floats(0.0, 1e6), updated_at=st.just(NOW - 5)))
    model = draw(MODELS)
    intent = draw(st.sampled_from([None, Intent(model=model, total_steps=4104)]))
    kw: dict[str, Any] = {}
    if draw(st.booleans()):
        kw["claim_ratio"] = draw(st.sampled_from([1.0, 1.5, math.inf]))
    if draw(st.booleans()):
        kw["claim_overrun"] = True
    return running(str(i), start=NOW - 600, gpus=draw(st.integers(1, 16)), intent=intent,
                   progress=progress, attained_gpu_s=attained,
                   predicted_remaining_s=draw(st.none() | st.floats(-10.0, 1e5)), **kw)


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n = draw(st.integers(0, 12))
    jobs = tuple(draw(running_job(i)) for i in range(n))
    return ClusterSnapshot(time=NOW, jobs=jobs, nodes=nodes(0, 0))


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_bulk_verdicts_are_claims_stand_job_by_job(s: ClusterSnapshot) -> None:
    want = reference(s)
    assert predictions_stand(s) == want
    memo = StandingClaims()
    assert memo(s) == want and memo(s) == want  # a plain snapshot's running_ids is new


def test_some_claims_stand_and_some_do_not() -> None:
    """The property above is not vacuous: each outcome, and each reason, occurs."""
    liar = Progress(steps_done=4103, steps_total=4104, rate=100_000.0, updated_at=NOW - 5)
    honest = Progress(steps_done=2000, steps_total=4104, rate=6.8, updated_at=NOW - 5)
    resnet = Intent(total_steps=4104, model="resnet50")
    jobs = (running("a", intent=resnet, progress=honest, attained_gpu_s=300.0,
                    predicted_remaining_s=300.0),
            running("b", intent=resnet, progress=liar, attained_gpu_s=30.0,
                    predicted_remaining_s=0.1),
            running("c", intent=resnet, progress=honest, attained_gpu_s=300.0,
                    predicted_remaining_s=300.0, claim_ratio=math.inf),
            running("d", intent=resnet, progress=honest, attained_gpu_s=300.0,
                    predicted_remaining_s=300.0, claim_overrun=True),
            running("e", intent=resnet, progress=honest, attained_gpu_s=300.0),
            running("f", progress=liar, attained_gpu_s=30.0, predicted_remaining_s=0.1))
    s = ClusterSnapshot(time=NOW, jobs=jobs, nodes=nodes(0))
    assert predictions_stand(s) == reference(s) == [True, False, False, False, False, True]


class _Watching:
    """A fake policy for the simulator: asks a `StandingClaims` at every event and checks it
    against `claims_stand` job by job on the same snapshot."""

    name = "watching"

    def __init__(self) -> None:
        self.memo = StandingClaims()
        self.checked = self.stood = self.fell = self.shared = self.carried = 0
        self.last: frozenset[Any] | None = None

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if snapshot.running_ids is self.last:
            self.shared += 1
        elif snapshot.running_changes is not None and snapshot.running_changes.since is \
                self.last:
            self.carried += 1  # the kept parts carried over the runs started and stopped
        self.last = snapshot.running_ids
        got = self.memo(snapshot)
        assert got == reference(snapshot), snapshot.time
        self.checked += len(got)
        self.stood += sum(got)
        self.fell += len(got) - sum(got)
        return Decision(policy=self.name)


def test_kept_verdicts_hold_through_a_simulation() -> None:
    """In the simulator snapshots share a running set while nothing starts or ends (then the
    kept fixed parts are used as they are), and say which runs started and stopped since
    (then they are carried over), while progress moves."""
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                   "itp-deadline").jobs, 0, 300)
    # every 7th job's progress is faster than its model allows: its claims never stand
    jobs = tuple(dataclasses.replace(j, total_steps=j.total_steps * 1000)
                 if i % 7 == 0 and j.total_steps else j for i, j in enumerate(jobs))
    p = _Watching()
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, 1.0, 4), gpus_per_node=4,
                          tick_s=30.0, skip_futile=False)
    Simulator(jobs, p, config).run()  # type: ignore[arg-type]
    assert p.checked > 1000 and p.shared > 50 and p.carried > 50
    assert p.stood > 1000 and p.fell > 100
