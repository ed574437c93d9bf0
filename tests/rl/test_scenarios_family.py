"""A scenarios table may name a workload family instead of a trace file: its traces are
generated into the trace cache, the same as `slurm-rl trace generate` writes, and its
scenarios carry the family for the trainer's per-family curve. Held-out families are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.rl.scenarios import read_scenarios, trace_cache
from slurm_rl.sim.run import load_jobs
from slurm_rl.sim.workloads import HELD_OUT_FAMILIES, generate

FILE = """
[[scenario]]
{scenario}
[[validation]]
trace = "data:itp-deadline-cluster03.csv"
windows = ["1000:300"]
loads = [1.0]
"""


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "slurm-rl" / "traces"


def read(tmp_path: Path, scenario: str) -> tuple:  # type: ignore[type-arg]
    path = tmp_path / "train.toml"
    path.write_text(FILE.format(scenario=scenario))
    return read_scenarios(path)


def test_a_family_table_generates_its_traces(tmp_path: Path, cache: Path) -> None:
    _, sc, (val,) = read(tmp_path, 'family = "diurnal"\njobs = 300\ntrace_seeds = [4, 5]\n'
                         'loads = [1.0, 1.3]\ngpus_per_node = 8')
    assert trace_cache() == cache
    names = [Path(s.trace).name for s in sc]
    assert [n.rsplit("-", 1)[0] for n in names] == ["diurnal-300-seed4"] * 2 + [
        "diurnal-300-seed5"] * 2
    assert [s.load for s in sc] == [1.0, 1.3, 1.0, 1.3]
    assert all(Path(s.trace).parent == cache for s in sc)
    assert {(s.family, s.fmt, s.gpus_per_node) for s in sc} == {("diurnal", "itp", 8)}
    jobs = load_jobs(sc[0].trace, "itp")
    want = generate("diurnal", 300, 4)
    assert [(j.submit, j.duration, j.gpus) for j in jobs] == [
        (j.submit, j.duration, j.gpus) for j in want]
    # A trace file's scenarios are labelled by its file name.
    assert val.family == "itp-deadline-cluster03"


@pytest.mark.parametrize(("scenario", "message"), [
    ('family = "heavy-tail"', "heavy-tail is held out of training"),
    ('family = "nope"', "family: unknown family 'nope' (valid: itp, diurnal)"),
    ('family = "itp"\ntrace = "data:itp-deadline-cluster03.csv"', "trace: not with family"),
    ('family = "itp"\nformat = "itp-deadline"', "format: not with family"),
    ('family = "itp"\njobs = 0', "jobs: expected a whole number of at least 1, got an integer (0)"),
    ('family = "itp"\ntrace_seeds = [1.5]', "trace_seeds: expected whole numbers"),
    ('trace = "data:itp-deadline-cluster03.csv"\njobs = 10', "jobs: only with family"),
])
def test_bad_family_tables_are_one_line(tmp_path: Path, scenario: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"\[\[scenario\]\] #1") as exc:
        read(tmp_path, scenario)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_every_held_out_family_is_refused(tmp_path: Path) -> None:
    for family in HELD_OUT_FAMILIES:
        with pytest.raises(ValueError, match="held out of training"):
            read(tmp_path, f'family = "{family}"')


def test_the_families_scenarios_file_reads() -> None:
    from slurm_rl.rl.config import TrainConfig

    over, sc, val = read_scenarios(Path(__file__).parents[2] / "docs" / "rl"
                                   / "train-families.toml")
    TrainConfig(**over)
    assert {s.family for s in sc} == {s.family for s in val} == {"itp", "diurnal"}
    assert not {s.trace for s in sc} & {s.trace for s in val}  # other generator seeds
    assert {s.gpus_per_node for s in sc} == {4, 8}
    assert {"tsafrir", "fixed", "factor"} == {
        s.time_limit.model.value for s in sc if s.time_limit is not None}


def test_a_changed_family_is_generated_again(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from slurm_rl.sim.workloads import FAMILIES

    _, (before,), _ = read(tmp_path, 'family = "itp"\njobs = 300\nloads = [1.3]')
    monkeypatch.setitem(FAMILIES, "itp", replace(FAMILIES["itp"], mean_gap_s=600.0))
    _, (after,), _ = read(tmp_path, 'family = "itp"\njobs = 300\nloads = [1.3]')
    assert before.trace != after.trace
    assert Path(before.trace).is_file() and Path(after.trace).is_file()
    assert load_jobs(before.trace, "itp") != load_jobs(after.trace, "itp")
