"""No buying priority with deadlines: the shared rule (urgency.py), its use
in `deadline` and `edf` on hand-built snapshots, and the option's validation."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from policy_builders import NOW, ids, job, nodes, order_of, running, snap

from slurm_rl.core import Intent, ServiceClass
from slurm_rl.policies import make
from slurm_rl.policies.urgency import capped, check_share, deadline_not_besteffort, has_deadline

CRIT, BE = ServiceClass.CRITICAL, ServiceClass.BESTEFFORT


def dl(seconds: float, **kw: object) -> Intent:
    return Intent(deadline=NOW + seconds, **kw)  # type: ignore[arg-type]


# -- the rule --------------------------------------------------------------------------------

def test_capped_counts_held_gpus_first_then_in_order() -> None:
    ranked = [("g", 2), ("h", 4), ("g", 2), ("g", 1), ("", 64), ("h", 1)]
    # g holds 1: 1 + 2 = 3 fits a budget of 4; + 2 = 5 does not; + 1 = 4 fits (a smaller job
    # after a capped one may still fit). h: 4 fits, then 5 does not. No user: never capped.
    users = {"g", "h", ""}
    assert capped(ranked, {"g": 1}, 4.0, users) == [2, 5]
    assert capped(ranked, {}, math.inf, users) == []
    assert capped([("g", 1)], {"g": 3}, 3.0, {"g", ""}) == [0]
    # A user alone in the queue passes nobody: never capped.
    assert capped([("g", 1)], {"g": 3}, 3.0, {"g"}) == []


def test_what_counts_as_urgent() -> None:
    assert deadline_not_besteffort(Intent(deadline=1.0))
    assert deadline_not_besteffort(Intent(deadline=1.0, service_class=CRIT))
    assert not deadline_not_besteffort(Intent(deadline=1.0, service_class=BE))
    assert not deadline_not_besteffort(Intent(service_class=CRIT))  # the class alone buys nothing
    assert not deadline_not_besteffort(None)
    assert has_deadline(Intent(deadline=1.0, service_class=BE)) and not has_deadline(Intent())


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, math.nan, math.inf, "0.5", True, None])
def test_share_outside_zero_one_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^urgent_share must be a number in \(0, 1\], got "):
        check_share(bad)
    for policy in ("deadline", "edf"):
        with pytest.raises(ValueError, match=r"^urgent_share must be a number in \(0, 1\]"):
            make(policy, urgent_share=bad)
    check_share(1)
    check_share(0.01)


def test_bad_share_on_the_command_line_is_one_clear_error() -> None:
    from slurm_rl.sim.cli import simulate

    result = CliRunner().invoke(simulate, [
        "--trace", "data:itp-deadline-cluster01.csv", "--format", "itp-deadline",
        "--window", "0:20", "--load", "1", "--policy", "deadline",
        "--policy-option", "urgent_share=1.5"])
    assert result.exit_code == 2  # an option the policy refuses is a usage error
    lines = [x for x in result.output.splitlines() if x.startswith("Error:")]
    assert lines == ["Error: Invalid value for '--policy-option': urgent_share must be a "
                     "number in (0, 1], got 1.5"], result.output


# -- deadline --------------------------------------------------------------------------------

def greedy_and_honest(**greedy: object) -> tuple[object, ...]:
    """8 GPUs (2 nodes, all free). greedy: four 1-GPU critical jobs with tight deadlines (slack
    100 s); alice: two standard jobs with looser ones (slack 2000 s) and one without."""
    g = [job(f"g{i}", user="greedy", submit=i, predicted_remaining_s=1000,
             intent=dl(1100, service_class=CRIT), **greedy) for i in range(4)]
    a = [job(f"a{i}", user="alice", submit=10 + i, predicted_remaining_s=1000,
             intent=dl(3000)) for i in range(2)]
    return (*g, *a, job("a-nodl", user="alice", submit=5))


def test_deadline_caps_a_users_urgent_gpus_at_the_share() -> None:
    s = snap(*greedy_and_honest(), nodes=nodes(0, 0))  # budget 0.25 x 8 = 2 GPUs
    d = make("deadline").decide(s)
    # Two of greedy's jobs keep their rank; the other two wait by age with the no-deadline job.
    assert ids(d) == ["g0", "g1", "a0", "a1", "g2", "g3", "a-nodl"]
    assert order_of(d, "g2").reason.startswith(
        "urgent share of user greedy over 25 %: ordered as standard, no deadline (uncapped: "
        "critical, deadline t=11100s)")
    assert order_of(d, "g0").reason.startswith("critical, deadline t=11100s, min share 1 GPUs")
    # Without the share binding (the whole cluster), today's order: critical first.
    assert ids(make("deadline", urgent_share=1.0).decide(s)) == [
        "g0", "g1", "g2", "g3", "a0", "a1", "a-nodl"]


def test_running_urgent_jobs_count_first() -> None:
    held = running("g-run", user="greedy", gpus=2, intent=dl(5000), predicted_remaining_s=100)
    s = snap(held, *greedy_and_honest(), nodes=nodes(2, 0))
    d = make("deadline").decide(s)
    assert ids(d)[:2] == ["a0", "a1"]  # greedy's 2 running GPUs use its whole share
    assert all(order_of(d, f"g{i}").reason.startswith("urgent share") for i in range(4))
    # a running job without a deadline is not urgent: it does not count
    free = running("g-run", user="greedy", gpus=2, predicted_remaining_s=100)
    d = make("deadline").decide(snap(free, *greedy_and_honest(), nodes=nodes(2, 0)))
    assert ids(d)[:2] == ["g0", "g1"]


def test_a_user_alone_in_the_queue_is_not_capped() -> None:
    # tests/daemon/test_daemon_e2e.py's case: one user fills the cluster with tight deadlines
    # after their own jobs without one; nobody else waits, so their deadlines order them.
    mine = [job(f"relaxed{i}", user="me", submit=i, gpus=4) for i in range(4)]
    mine += [job(f"tight{i}", user="me", submit=10 + i, gpus=4, predicted_remaining_s=2,
                 intent=dl(240)) for i in range(4)]
    for policy in ("deadline", "edf"):
        d = make(policy).decide(snap(*mine, nodes=nodes(4, 4, 4, 4)))
        assert ids(d)[:4] == [f"tight{i}" for i in range(4)]
        # an unmanaged job of someone else (outside the daemon's scope) changes nothing
        other = job("other", user="you", submit=0, managed=False)
        assert ids(make(policy).decide(snap(*mine, other, nodes=nodes(4, 4, 4, 4)))) == ids(d)


def test_unmanaged_running_jobs_use_no_share() -> None:
    held = running("g-run", user="greedy", gpus=2, intent=dl(5000), predicted_remaining_s=100,
                   managed=False)  # outside the daemon's scope: never boosted by it
    d = make("deadline").decide(snap(held, *greedy_and_honest(), nodes=nodes(2, 0)))
    assert ids(d)[:2] == ["g0", "g1"]


def test_no_user_is_never_capped() -> None:
    jobs = [job(f"x{i}", submit=i, predicted_remaining_s=1000, intent=dl(1100 + i))
            for i in range(6)]
    d = make("deadline").decide(snap(*jobs, job("a", user="alice", submit=9),
                                     nodes=nodes(0, 0)))  # 6 GPUs of deadlines, budget 2
    assert ids(d) == [*(f"x{i}" for i in range(6)), "a"]
    assert not any("urgent share" in o.reason for o in d.order)


def test_demoted_and_besteffort_jobs_use_no_share() -> None:
    # A hard deadline that cannot be met even if started now is already demoted to the back
    # (no boost); a besteffort job is never ahead. Neither takes greedy's 2 GPUs of share.
    s = snap(job("hopeless", user="greedy", submit=0, predicted_remaining_s=5000,
                 intent=dl(100, hard=True, service_class=CRIT)),
             job("be", user="greedy", submit=1, gpus=2, predicted_remaining_s=100,
                 intent=dl(1000, service_class=BE)),
             job("ok", user="greedy", submit=2, gpus=2, predicted_remaining_s=100,
                 intent=dl(1000)), job("plain", user="alice", submit=3), nodes=nodes(0, 0))
    d = make("deadline").decide(s)
    assert ids(d) == ["ok", "plain", "be", "hopeless"]  # besteffort after the other classes
    assert order_of(d, "hopeless").reason.startswith("demoted: hard deadline")
    assert not any("urgent share" in o.reason for o in d.order)


def test_soft_late_jobs_use_no_share() -> None:
    # Soft deadlines that cannot be met run best-effort, ordered with the jobs without one
    # (shortest first by age): they buy nothing, so the share does not bound them.
    late = [job(f"late{i}", user="greedy", submit=i, predicted_remaining_s=1000,
                intent=dl(10)) for i in range(3)]
    s = snap(*late, job("plain", user="alice", submit=9), nodes=nodes(3))  # 4 GPUs: budget 1
    d = make("deadline").decide(s)
    assert ids(d) == ["late0", "late1", "late2", "plain"]  # "plain": duration unknown, last
    assert "cannot be met given the reservations ahead" in order_of(d, "late0").reason
    assert not any("urgent share" in o.reason for o in d.order)


def test_capped_range_job_is_ordered_by_age_at_its_minimum() -> None:
    it = dl(3000, gpus_min=1, gpus_max=4, model="resnet50", batch_size=256)
    big = job("big", user="greedy", gpus=1, intent=it, predicted_remaining_s=4000)
    # 4 GPUs, budget 1: its share (2 GPUs: 1 would miss) is over the share.
    d = make("deadline", min_gain=0.99).decide(snap(big, job("n", submit=-1, gpus=3),
                                                    nodes=nodes(0)))
    assert ids(d) == ["big", "n"]  # best-effort: 4000 s at 1 GPU before a job of unknown length
    assert order_of(d, "big").gpus == 1  # the range minimum, not its share
    assert "(uncapped: standard, deadline" in order_of(d, "big").reason
    # Alone in the queue it is not capped: its share, reserved.
    o = make("deadline", min_gain=0.99).decide(snap(big, nodes=nodes(0))).order[0]
    assert o.gpus == 2 and o.reason.startswith("standard, deadline")
