"""The queue-health guard (policies/guard.py): when a job starves, the fallback decides, with
hysteresis; a learned policy under it cannot stall short jobs behind long ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from policy_builders import NOW, job, nodes, running, snap

from slurm_rl import policies
from slurm_rl.core import Decision
from slurm_rl.policies.capabilities import CycleState, Gated, Preempting, Stateful
from slurm_rl.policies.gittins import Gittins
from slurm_rl.policies.guard import GuardConfig, Guarded, starving

DAY = 86400.0
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for its scenario


def _long(jid: str = "long", gpus: int = 4, ran_s: float = DAY) -> object:
    return running(jid, gpus=gpus, submit=NOW - ran_s, start=NOW - ran_s,
                   attained_gpu_s=gpus * ran_s)


W = GuardConfig(wait_s=600)
SWITCH = GuardConfig(mode="switch", wait_s=600, hold_s=3600, check_s=0)


def test_a_job_that_waited_behind_a_long_run_the_fallback_would_requeue_starves() -> None:
    s = snap(_long(), job("short", submit=NOW - 700), nodes=nodes(4))
    found = starving(s, Gittins(), W)
    assert found is not None and found.job.id == "short" and found.victims == 1
    assert "waited 12 min" in found.why()


@pytest.mark.parametrize("case", ["waited too little", "held", "not managed", "no victim",
                                  "does not fit even so", "victim not restartable"])
def test_what_is_not_starving(case: str) -> None:
    pending = {"waited too little": job("short", submit=NOW - 300),
               "held": job("short", submit=NOW - 700, held=True),
               "not managed": job("short", submit=NOW - 700, managed=False),
               "no victim": job("short", submit=NOW - 700),
               "does not fit even so": job("short", submit=NOW - 700, gpus=8, nodes=1),
               "victim not restartable": job("short", submit=NOW - 700)}[case]
    other = (running("long", gpus=4, submit=NOW - DAY, start=NOW - DAY,
                     attained_gpu_s=4 * DAY, managed=False) if case == "no victim"
             else running("long", gpus=4, submit=NOW - DAY, start=NOW - DAY,
                          attained_gpu_s=4 * DAY, restartable=False)
             if case == "victim not restartable"  # its requeue would be refused
             else _long())
    assert starving(snap(other, pending, nodes=nodes(4)), Gittins(), W) is None


def test_only_runs_older_than_victim_run_s_are_requeued_for_a_starving_job() -> None:
    # a run of 2 hours: gittins would requeue it, but rl may do that itself, so the guard
    # leaves it (victim_run_s 6 h), unless told otherwise
    s = snap(_long(ran_s=7200), job("short", submit=NOW - 700), nodes=nodes(4))
    assert starving(s, Gittins(), W) is None
    assert starving(s, Gittins(), GuardConfig(wait_s=600, victim_run_s=3600)) is not None


class FakeOrder:
    """A fake primary for the guard's own logic: orders pending jobs by id, never requeues;
    counts its calls."""

    name = "fake"

    def __init__(self) -> None:
        self.calls = 0

    def decide(self, snapshot):  # type: ignore[no-untyped-def]
        self.calls += 1
        return Decision(policy=self.name)


def test_the_fallback_decides_while_a_job_starves_and_hold_s_after() -> None:
    g = Guarded(FakeOrder(), Gittins(), SWITCH)
    calm = snap(_long(), job("short", submit=NOW - 100), nodes=nodes(4))
    assert g.decide(calm).policy == "fake" and not g.guard_status().fallback_active
    starved = snap(_long(), job("short", submit=NOW - 700), nodes=nodes(4), time=NOW + 10)
    d = g.decide(starved)
    assert d.policy == "gittins (guard of fake)"
    assert [p.job_id for p in d.preemptions] == ["long"]
    assert any(n.startswith("guard: decided by the fallback gittins") and "job short" in n
               for n in d.notes)
    st = g.guard_status()
    assert st.fallback_active and st.switches == 1 and st.since == NOW + 10
    # the job started; the fallback still decides within hold_s, then the primary again
    quiet = snap(running("short", start=NOW + 20, submit=NOW - 700), nodes=nodes(1),
                 time=NOW + 3000)
    assert g.decide(quiet).policy.startswith("gittins")
    later = snap(running("short", start=NOW + 20, submit=NOW - 700), nodes=nodes(1),
                 time=NOW + 10 + 3600)
    assert g.decide(later).policy == "fake"
    assert g.guard_status().switches == 2 and not g.guard_status().fallback_active
    g.reset()
    assert g.guard_status().switches == 0


def test_the_monitor_looks_once_per_check_s() -> None:
    g = Guarded(FakeOrder(), Gittins(), GuardConfig(mode="switch", wait_s=600, check_s=300))
    g.decide(snap(_long(), job("short", submit=NOW - 100), nodes=nodes(4)))
    # starving 100 s later, but the next look is due only at NOW + 300
    s = snap(_long(), job("short", submit=NOW - 600), nodes=nodes(4), time=NOW + 100)
    assert g.decide(s).policy == "fake"
    s = snap(_long(), job("short", submit=NOW - 600), nodes=nodes(4), time=NOW + 300)
    assert g.decide(s).policy.startswith("gittins")


def test_futile_and_decide_at_one_point_look_once() -> None:
    class FakeGated(FakeOrder):
        """A fake Gated primary whose futile is always True."""

        def futile(self, snapshot, cycle):  # type: ignore[no-untyped-def]
            return True

        def decide(self, snapshot, cycle=None):  # type: ignore[no-untyped-def]
            return super().decide(snapshot)

    g = Guarded(FakeGated(), Gittins(), SWITCH)
    assert isinstance(g, Gated) and isinstance(g, Preempting) and isinstance(g, Stateful)
    s = snap(_long(), job("short", submit=NOW - 700), nodes=nodes(4))
    cycle = CycleState()
    assert g.futile(s, cycle) is False  # the fallback decides: never skipped
    assert g.decide(s, cycle).policy.startswith("gittins")
    assert g.guard_status().switches == 1
    calm = snap(_long(), job("short", submit=NOW + 3900), nodes=nodes(4), time=NOW + 4000)
    assert g.futile(calm, CycleState()) is True  # the primary's own rule again


def test_override_puts_the_starving_job_first_and_keeps_the_rest_of_the_order() -> None:
    class FakeRanker(FakeOrder):
        """A fake primary that ranks pending jobs by id and requeues nothing."""

        def decide(self, snapshot):  # type: ignore[no-untyped-def]
            from slurm_rl.core import JobOrder

            pend = sorted(j.id for j in snapshot.pending)
            return Decision(policy=self.name,
                            order=tuple(JobOrder(job_id=j, rank=i) for i, j in enumerate(pend)))

    g = Guarded(FakeRanker(), Gittins(), GuardConfig(wait_s=600, check_s=0))
    s = snap(_long(), job("a-new", submit=NOW - 60), job("b-new", submit=NOW - 60),
             job("z-old", submit=NOW - 700), nodes=nodes(4))
    d = g.decide(s)
    assert [o.job_id for o in sorted(d.order, key=lambda o: o.rank)] == ["z-old", "a-new",
                                                                          "b-new"]
    assert [p.job_id for p in d.preemptions] == ["long"]
    assert d.policy == "fake" and any(n.startswith("guard: 1 starving job(s) first")
                                      for n in d.notes)
    assert "starving" in next(o for o in d.order if o.job_id == "z-old").reason
    # nothing starves: the primary's decision as it is
    calm = snap(_long(), job("a-new", submit=NOW - 60), nodes=nodes(4), time=NOW + 1)
    assert g.decide(calm) == FakeRanker().decide(calm)


@pytest.mark.parametrize(("options", "message"), [
    ({"guard": "maybe"}, "guard must be on or off"),
    ({"guard_mode": "sometimes"}, "guard_mode must be one of switch, override"),
    ({"guard_wait_s": "soon"}, "guard_wait_s must be a number >= 0"),
    ({"guard_hold_s": -1}, "guard_hold_s must be a number >= 0"),
    ({"guard": "off", "guard_wait_s": 60}, "guard_wait_s: not with guard=off"),
])
def test_bad_guard_options_are_one_clear_error(options: dict[str, object],
                                               message: str) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=message):
        policies.make("rl", **options)


# -- the regime the guard is for, in the simulator (benchmarks/bench_guard.py's scenario) -----

def test_under_rl_short_jobs_behind_a_full_cluster_wait_little_more_than_under_gittins() -> None:
    pytest.importorskip("torch")
    from benchmarks.bench_guard import burst, short_wait

    jobs = burst(0)
    gittins = short_wait(jobs, policies.make("gittins"))
    guarded = policies.make("rl")
    rl = short_wait(jobs, guarded)
    assert rl <= 2 * gittins + 600, (rl, gittins)
    assert guarded.guard_status().switches >= 1  # type: ignore[attr-defined]
    # and what it guards against: without the guard, rl lets them wait for days
    assert short_wait(jobs, policies.make("rl", guard="off")) > 10 * (rl + 600)


def test_under_the_daemons_rules_the_guard_fires_only_for_runs_that_may_be_requeued() -> None:
    # The burst scenario (long 8-GPU runs, then short jobs) in the engine's default: the
    # daemon's restart rules. With no job opted in, no requeue the fallback asks for would be
    # made, so the guard does not fire; with every job opted in it does, as with free restarts.
    pytest.importorskip("torch")
    from benchmarks.bench_guard import burst
    from slurm_rl.sim.config import EngineConfig
    from slurm_rl.sim.run import Sizing, simulate

    jobs = burst(0)
    switches = {}
    for share in (0.0, 1.0):
        guarded = policies.make("rl")
        simulate(jobs, guarded, Sizing(gpus_per_node=8, nodes=4),
                 engine=EngineConfig(nodes=4, gpus_per_node=8, opt_in_fraction=share))
        switches[share] = guarded.guard_status().switches  # type: ignore[attr-defined]
    assert switches[0.0] == 0 < switches[1.0], switches
