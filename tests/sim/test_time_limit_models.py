"""Time limits for traces without them: the tsafrir model (round values users pick, Tsafrir,
Etsion & Feitelson, JSSPP 2005), the factor and fixed models, their TOML tables and flags."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.cli import main
from slurm_rl.sim import tsafrir
from slurm_rl.sim.config import (
    WEEK_S,
    EngineConfig,
    TimeLimitEstimate,
    TimeLimitModel,
    from_table,
)
from slurm_rl.sim.jobs import make_jobs
from slurm_rl.sim.run import load_jobs, resolve_trace_path

H, M = 3600, 60
TSAFRIR = TimeLimitEstimate(model=TimeLimitModel.TSAFRIR)
WEEK_HEAD = (5 * M, 10 * M, 15 * M, 20 * M, 30 * M, 1 * H, 2 * H, 3 * H, 4 * H, 5 * H, 6 * H,
             8 * H, 10 * H, 12 * H, 18 * H, 50 * H, 100 * H, 150 * H, 160 * H, 168 * H)
"""The 20 popular values for a 7-day maximum: the 15 of all four logs, the maximum, and the
largest multiples of 100 h, 50 h and 10 h below it."""


def week(seed: int = 0) -> tsafrir.Histogram:
    return tsafrir.histogram(max_s=int(WEEK_S), bins=tsafrir.DEFAULT_BINS,
                             head_share=tsafrir.HEAD_SHARE, max_share=None, seed=seed)


def limits(durations: list[float], est: TimeLimitEstimate = TSAFRIR, seed: int = 0
           ) -> list[float]:
    return [est.for_job(d, f"job{i}", seed) for i, d in enumerate(durations)]


def test_the_popular_values_are_the_papers_round_set() -> None:
    assert tsafrir.head_times(int(WEEK_S)) == (168 * H, *WEEK_HEAD[:-1])
    hist = week()
    assert len(hist.times) == tsafrir.DEFAULT_BINS == 90
    assert set(WEEK_HEAD) <= set(hist.times)
    share = dict(zip(hist.times, hist.shares, strict=True))
    assert sum(share[t] for t in WEEK_HEAD) == pytest.approx(0.89)
    assert share[168 * H] == pytest.approx(0.217329, abs=1e-6) == max(hist.shares)
    assert sum(hist.shares) == pytest.approx(1.0)
    # the tail: whole minutes (or 10-30 s off one), below the maximum, not a head value
    tail = [t for t in hist.times if t not in WEEK_HEAD]
    assert len(tail) == 70 and all(t % 10 == 0 and 0 < t < 168 * H for t in tail)
    # a shorter maximum: the values above it go, round multiples below it complete the 20
    assert tsafrir.head_times(24 * H) == (24 * H, *sorted(
        (*WEEK_HEAD[:15], 15 * H, 16 * H, 20 * H, 22 * H)))


def test_the_papers_number_of_values_by_log_size() -> None:
    assert [tsafrir.bins_for_jobs(n) for n in (0, 20, 200, 1000, 10000, 70000, 250000,
                                               10**6)] == [0, 10, 20, 35, 90, 340, 565, 565]
    assert tsafrir.bins_for_jobs(5500) == 35 + round(4500 * 55 / 9000)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**6))
def test_popularity_ranks_follow_the_logs(seed: int) -> None:
    import random

    rows = tsafrir.TIME_RANK_TO_POPULARITY
    ranks = tsafrir.popularity_ranks(20, random.Random(seed))
    assert sorted(ranks) == list(range(1, 21)) and ranks[0] == 1
    for ttr, rank in enumerate(ranks):  # a rank this or an earlier time rank had in a log
        assert rank in {r for row in rows[:ttr + 1] for r in row}
        # ... and, once due (its last time rank in the logs), taken first of the ranks due
        # then: one per time rank, so at most two late with this table
        assert ttr - max(t for t, row in enumerate(rows) if rank in row) <= 2


@settings(max_examples=300, deadline=None)
@given(duration=st.floats(0.001, 30 * 86400.0), key=st.text(max_size=12),
       seed=st.integers(-(2**40), 2**40))
def test_a_limit_is_a_value_of_the_model_and_never_less_than_the_run_time(
        duration: float, key: str, seed: int) -> None:
    limit = TSAFRIR.for_job(duration, key, seed)
    assert limit >= duration
    assert limit == TSAFRIR.for_job(duration, key, seed)  # a function of seed, job, run time
    if duration <= WEEK_S:
        assert limit in week(seed).times
    else:  # longer than the partition allowed: its run time, rounded up to a whole hour
        assert limit % H == 0 and limit - duration < H


def test_shares_of_the_values_asked_for() -> None:
    """Jobs shorter than every value draw from the whole histogram: the shares come back."""
    got = Counter(limits([1.0] * 40000))
    hist = week()
    share = dict(zip(hist.times, hist.shares, strict=True))
    assert got[168 * H] / 40000 == pytest.approx(share[168 * H], abs=0.01)  # about 0.22
    assert sum(got[t] for t in WEEK_HEAD) / 40000 == pytest.approx(0.89, abs=0.01)
    for t in WEEK_HEAD:
        assert got[t] / 40000 == pytest.approx(share[t], abs=0.01)


def test_on_a_trace_the_maximum_is_popular_and_accuracy_spreads() -> None:
    trace = load_jobs(resolve_trace_path("data:itp-deadline-cluster09.csv"), "itp-deadline")
    durations = [j.duration for j in trace]
    got = limits(durations)
    acc = [d / limit for d, limit in zip(durations, got, strict=True)]
    assert all(0 < a <= 1 for a in acc)
    assert sum(limit == WEEK_S for limit in got) / len(got) >= 0.217 - 0.015
    assert sum(limit in WEEK_HEAD for limit in got) / len(got) > 0.75
    # spread over (0, 1], not bunched as factor's 2 x run time rounded up to an hour is
    quarters = Counter(min(int(a * 4), 3) for a in acc)
    assert all(quarters[q] / len(acc) > 0.05 for q in range(4)), quarters
    factor = [d / limit for d, limit in zip(durations, limits(durations, TimeLimitEstimate()),
                                            strict=True)]
    assert max(factor) <= 0.5 and statistics.pstdev(acc) > 2 * statistics.pstdev(factor)


def test_limits_are_seeded_and_do_not_depend_on_the_window() -> None:
    trace = load_jobs(resolve_trace_path("data:itp-deadline-cluster10.csv"), "itp-deadline")
    cfg = EngineConfig(nodes=64, gpus_per_node=8, time_limit=TSAFRIR, seed=5)
    whole = {j.trace.id: j.limit0 for j in make_jobs(trace, cfg)[0]}
    part = {j.trace.id: j.limit0 for j in make_jobs(trace[100:160], cfg)[0]}
    assert part == {k: whole[k] for k in part}
    tsafrir.histogram.cache_clear()  # built again from the seed: the same limits
    assert {j.trace.id: j.limit0 for j in make_jobs(trace, cfg)[0]} == whole
    other = {j.trace.id: j.limit0
             for j in make_jobs(trace, dataclasses.replace(cfg, seed=6))[0]}
    assert sum(other[k] != whole[k] for k in whole) > len(whole) // 3
    assert all(j.limit0 >= j.trace.duration for j in make_jobs(trace, cfg)[0])


def test_factor_and_fixed_are_as_before() -> None:
    est = TimeLimitEstimate()
    assert est.model is TimeLimitModel.FACTOR
    assert [est.for_job(d, "k", 0) for d in (30, 2400, 8 * H)] == [H, 2 * H, 16 * H]
    fixed = TimeLimitEstimate(fixed_s=600.0)
    assert fixed.model is TimeLimitModel.FIXED and fixed.for_job(5000, "k", 3) == 600.0
    with pytest.raises(ValueError, match="model fixed needs fixed_s"):
        TimeLimitEstimate(model=TimeLimitModel.FIXED)
    with pytest.raises(ValueError, match="draws per job"):
        TSAFRIR.for_duration(100.0)


def test_toml_tables() -> None:
    def engine(table: dict[str, object]) -> EngineConfig:
        return from_table(EngineConfig, {"nodes": 1, "gpus_per_node": 1, "time_limit": table},
                          where="engine")

    tl = engine({"model": "tsafrir", "max_s": 2 * 86400, "max_share": 0.3}).time_limit
    assert (tl.model, tl.max_s, tl.max_share) == (TimeLimitModel.TSAFRIR, 172800, 0.3)
    assert engine({"fixed_s": 900.0}).time_limit.model is TimeLimitModel.FIXED
    bad: tuple[tuple[dict[str, object], str], ...] = (
            ({"model": "tsafir"}, r"\[engine.time_limit\] model: unknown time-limit model "
                                  r"'tsafir' \(valid: factor, fixed, tsafrir\)"),
            ({"model": "tsafrir", "factor": 3.0}, r"\[engine.time_limit\] factor not read by "
                                                  r"model tsafrir"),
            ({"factor": 3.0, "fixed_s": 60.0}, "factor not read by model fixed"),
            ({"model": "tsafrir", "max_s": 600}, "max_s must be whole seconds, at least 3600"),
            ({"model": "tsafrir", "max_share": 0.95}, "max_share must be more than 0"),
            ({"model": "tsafrir", "bins": "many"}, r"bins: expected an integer"),
            ({"model": "fixed"}, "model fixed needs fixed_s"))
    for table, message in bad:
        with pytest.raises(ValueError, match=message):
            engine(table)


def invoke(*args: str) -> tuple[int, str]:
    """fifo on a contended window (jobs wait, so backfill's plan from the limits matters)."""
    result = CliRunner().invoke(main, ["simulate", "--trace", "data:itp-deadline-cluster04.csv",
                                       "--format", "itp-deadline", "--policy", "fifo",
                                       "--nodes", "3", "--window", "3000:150", *args])
    return result.exit_code, result.output


def test_cli_models_reach_the_engine() -> None:
    outs = {}
    for args in ([], ["--time-limit-model", "tsafrir"], ["--time-limit-fixed", "600"],
                 ["--time-limit-model", "tsafrir", "--time-limit-max", "86400",
                  "--time-limit-max-share", "0.5", "--time-limit-bins", "40"]):
        code, out = invoke("--json", *args)
        assert code == 0, out
        outs[tuple(args)] = json.loads(out)["avg_jct_s"]
    assert len(set(outs.values())) == 4, outs  # each model plans differently here


@pytest.mark.parametrize(("args", "flag", "text"), [
    (["--time-limit-model", "fixed"], "--time-limit-fixed", "needs the limit"),
    (["--time-limit-model", "tsafrir", "--time-limit-fixed", "60"], "--time-limit-fixed",
     "not read by --time-limit-model tsafrir"),
    (["--time-limit-model", "tsafrir", "--time-limit-round", "60"], "--time-limit-round",
     "not read by --time-limit-model tsafrir"),
    (["--time-limit-max", "86400"], "--time-limit-max", "not read by --time-limit-model factor"),
    (["--time-limit-fixed", "60", "--time-limit-factor", "3"], "--time-limit-factor",
     "not read by --time-limit-model fixed"),
    (["--time-limit-model", "tsafrir", "--time-limit-max", "600"], "--time-limit-max",
     "600 is not in the range x>=3600"),
    (["--time-limit-model", "tsafrir", "--time-limit-max-share", "0.9"],
     "--time-limit-max-share", "not in the range 0<x<0.89"),
    (["--time-limit-model", "tsafrir", "--time-limit-bins", "0"], "--time-limit-bins",
     "not in the range x>=1"),
    (["--time-limit-model", "oracle"], "--time-limit-model", "'oracle' is not one of"),
])
def test_cli_errors_name_the_flag(args: list[str], flag: str, text: str) -> None:
    code, out = invoke(*args)
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert code == 2 and len(errors) == 1, out
    assert f"'{flag}'" in errors[0] and text in errors[0]
    assert "Traceback" not in out
