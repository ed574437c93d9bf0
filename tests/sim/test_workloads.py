"""Workload families (slurm_rl/sim/workloads.py) and `slurm-rl trace`."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.sim.run import load_jobs
from slurm_rl.sim.workloads import DAY, FAMILIES, HELD_OUT_FAMILIES, generate


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_is_seeded_sorted_and_within_its_bounds(name: str) -> None:
    jobs = generate(name, 1500, seed=3)
    assert jobs == generate(name, 1500, seed=3)
    assert jobs != generate(name, 1500, seed=4)
    assert len(jobs) == 1500 and jobs[0].submit == 0.0
    assert all(a.submit <= b.submit for a, b in zip(jobs, jobs[1:], strict=False))
    fam = FAMILIES[name]
    assert all(fam.min_s <= j.duration <= fam.max_s and j.gpus >= 1 for j in jobs)
    assert len({j.id for j in jobs}) == 1500
    if fam.gpus:
        allowed = ({g for g, _ in fam.gpus} | {g for c in fam.durations for g, _ in c.gpus}
                   | ({fam.burst.gpus} if fam.burst else set()))
        assert {j.gpus for j in jobs} <= allowed


def test_heavy_tail_is_what_it_says() -> None:
    jobs = generate("heavy-tail", 20_000, seed=0)
    gpus = Counter(j.gpus for j in jobs)
    assert 0.92 < gpus[1] / len(jobs) < 0.96
    assert gpus[16] > 0  # multi-node jobs (16 GPUs on 4- or 8-GPU nodes)
    median = statistics.median(j.duration for j in jobs)
    assert 180 < median < 600  # a few minutes
    assert max(j.duration for j in jobs) > 7 * DAY  # runs of weeks
    long = [j for j in jobs if j.duration > DAY]
    assert sum(j.gpus >= 8 for j in long) > len(long) / 2  # mostly wide


def test_burst_puts_hundreds_of_short_jobs_behind_long_wide_ones() -> None:
    jobs = generate("burst", 3000, seed=0)
    wide = [j for j in jobs if j.gpus >= 4]
    short = [j for j in jobs if j.gpus == 1]
    assert statistics.median(j.duration for j in wide) > 6 * 3600
    assert statistics.median(j.duration for j in short) < 900
    # bursts: some 6-hour window holds at least 200 short arrivals
    times = sorted(j.submit for j in short)
    j = 0
    best = 0
    for i, t in enumerate(times):
        while times[j] < t - 6 * 3600:
            j += 1
        best = max(best, i - j + 1)
    assert best >= 200


def test_diurnal_arrivals_follow_the_day() -> None:
    jobs = generate("diurnal", 20_000, seed=0)
    by_hour = Counter(int(j.submit % DAY // 3600) for j in jobs)
    assert max(by_hour.values()) > 3 * min(by_hour.values())
    assert max(by_hour, key=by_hour.__getitem__) in range(12, 17)  # peak around 14:00


def test_itp_resamples_the_training_clusters() -> None:
    from slurm_rl.sim.workloads import _itp_pairs

    seen = {g for g, _ in _itp_pairs()}
    assert {j.gpus for j in generate("itp", 3000, seed=0)} <= seen


def test_held_out_families_are_families() -> None:
    assert set(HELD_OUT_FAMILIES) <= set(FAMILIES)


def test_trace_generate_writes_what_the_simulator_reads(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(main, ["trace", "generate", "--family", "debug", "--jobs", "200",
                                    "--seed", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "200 debug jobs" in res.output
    read = load_jobs(out, "itp")
    made = generate("debug", 200, seed=2)
    assert [(j.id, j.submit, j.duration, j.gpus) for j in read] == [
        (j.id, j.submit, j.duration, j.gpus) for j in made]
    listing = CliRunner().invoke(main, ["trace", "families"])
    assert listing.exit_code == 0 and "heavy-tail  [held out of training]" in listing.output


@pytest.mark.parametrize(("args", "message"), [
    (["--family", "nope"], "--family: unknown family 'nope' (valid: itp, heavy-tail"),
    (["--family", "debug", "--jobs", "0"], "--jobs"),
])
def test_trace_generate_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str],
                                                      message: str) -> None:
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(main, ["trace", "generate", *args, "--out", str(out)])
    assert res.exit_code == 2 and message in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_trace_generate_refuses_a_missing_folder(tmp_path: Path) -> None:
    out = tmp_path / "no" / "t.csv"
    res = CliRunner().invoke(main, ["trace", "generate", "--family", "itp", "--out", str(out)])
    assert res.exit_code == 2 and "--out: folder" in res.output and not out.exists()
