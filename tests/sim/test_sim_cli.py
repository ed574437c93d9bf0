"""`slurm-rl simulate` and `slurm-rl evaluate` end to end (small windows of shipped traces)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from slurm_rl.cli import main

TRACE = "data:itp-deadline-cluster10.csv"
KEYS = {"policy", "jobs", "nodes", "gpus_per_node", "avg_jct_s", "p50_jct_s", "p95_jct_s",
        "p99_jct_s", "makespan_s", "gpu_utilization", "deadline_hit_rate", "wall_s"}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_simulate_json_and_csv_outputs(tmp_path: Path) -> None:
    jobs_out, iv_out = tmp_path / "jobs.csv", tmp_path / "iv.csv"
    code, out = invoke("simulate", "--trace", TRACE, "--format", "itp-deadline",
                       "--policy", "fifo", "--nodes", "2", "--gpus-per-node", "8",
                       "--window", "10:40", "--seed", "3", "--json",
                       "--jobs-out", str(jobs_out), "--intervals-out", str(iv_out))
    assert code == 0, out
    s = json.loads(out)
    assert KEYS <= set(s)
    assert (s["policy"], s["jobs"], s["nodes"], s["gpus_per_node"], s["seed"]) == (
        "fifo", 40, 2, 8, 3)
    assert 0 < s["gpu_utilization"] <= 1 and 0 <= s["deadline_hit_rate"] <= 1
    assert s["p50_jct_s"] <= s["p95_jct_s"] <= s["p99_jct_s"]
    with jobs_out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["job_id", "submit", "start", "end", "gpus", "restarts", "deadline"]
    assert len(rows) == 40 and all(float(r["start"]) >= float(r["submit"]) for r in rows)
    with iv_out.open() as fh:
        ivs = list(csv.DictReader(fh))
    assert list(ivs[0]) == ["job_id", "start", "end", "gpus", "nodes"]
    assert ivs[0]["nodes"].startswith("node")


def test_simulate_without_deadlines_reports_null(tmp_path: Path) -> None:
    raw = tmp_path / "raw.csv"
    raw.write_text("job_id,submission_time,duration,num_gpu\na,0,100,1\nb,10,50,2\n")
    code, out = invoke("simulate", "--trace", str(raw), "--format", "itp", "--policy", "fifo",
                       "--load", "0.5", "--json")
    assert code == 0, out
    s = json.loads(out)
    assert s["deadline_hit_rate"] is None and s["avg_jct_s"] == 75.0


def test_simulate_slurm_like_flags_change_the_schedule(tmp_path: Path) -> None:
    """--conservative and --placement cons_tres reach the engine: on a contended window the
    node lists (and here the schedule) differ from the EASY / best-fit defaults."""
    outs: list[str] = []
    for extra in ([], ["--conservative", "--placement", "cons_tres"]):
        iv = tmp_path / f"iv{len(outs)}.csv"
        code, out = invoke("simulate", "--trace", TRACE, "--format", "itp-deadline",
                           "--policy", "fifo", "--nodes", "3", "--gpus-per-node", "4",
                           "--window", "0:120", "--json", "--intervals-out", str(iv), *extra)
        assert code == 0, out
        outs.append(iv.read_text())
    assert outs[0] != outs[1]
    code, out = invoke("simulate", "--trace", TRACE, "--format", "itp-deadline", "--policy",
                       "fifo", "--nodes", "2", "--placement", "first-fit")
    assert code == 2 and "--placement" in out


def test_simulate_restart_rules_reach_the_engine() -> None:
    """--restart-rules N: the daemon's restart rules, the cap N per job per hour; refusals
    show in the notes, and a bad N is a usage error naming the flag."""
    base = ["simulate", "--trace", TRACE, "--format", "itp-deadline", "--policy", "deadline",
            "--nodes", "2", "--gpus-per-node", "4", "--window", "0:150", "--elastic-fraction",
            "1", "--json"]
    code, free = invoke(*base)
    assert code == 0, free
    code, ruled = invoke(*base, "--restart-rules", "0")
    assert code == 0, ruled
    f, r = json.loads(free), json.loads(ruled)
    assert f["resizes"] + f["preemptions"] > 0
    assert r["resizes"] + r["preemptions"] == 0  # a cap of 0: no running job is restarted
    assert any("max_restarts_per_hour" in k for k in r["notes"])
    code, out = invoke(*base, "--restart-rules", "61")
    assert code == 2 and "--restart-rules" in out


def test_simulate_human_summary() -> None:
    code, out = invoke("simulate", "--trace", TRACE, "--format", "itp-deadline", "--policy",
                       "edf", "--load", "0.8", "--window", "0:30")
    assert code == 0, out
    assert "JCT avg" in out and "deadline hit rate" in out


def test_simulate_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\na,0,oops,1\n")
    code, out = invoke("simulate", "--trace", str(bad), "--format", "itp", "--policy", "fifo",
                       "--nodes", "1")
    assert code != 0 and "bad.csv:2: column duration (3)" in out
    code, out = invoke("simulate", "--trace", TRACE, "--format", "itp", "--policy", "fifo")
    assert code != 0 and "--nodes" in out and "--load" in out
    code, out = invoke("simulate", "--trace", TRACE, "--format", "itp", "--policy", "nope",
                       "--nodes", "1")
    assert code != 0 and "unknown policy 'nope'" in out
    code, out = invoke("simulate", "--trace", "data:nope.csv", "--format", "itp", "--policy",
                       "fifo", "--nodes", "1")
    assert code != 0 and "no shipped trace" in out


SCENARIOS = """
[evaluate]
out = "out"
policies = ["fifo", "srtf-oracle"]
loads = [0.5, 0.9]
seeds = [0]
title = "tiny"

[engine]
tick_s = 120.0

[[trace]]
name = "c10"
path = "data:itp-deadline-cluster10.csv"
format = "itp-deadline"
window = "0:60"
"""


def test_evaluate_writes_table_json_and_plots(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIOS)
    code, out = invoke("evaluate", "--scenarios", str(toml), "--no-progress")
    assert code == 0, out
    folder = tmp_path / "out"
    for name in ("results.md", "results.json", "jct_cdf.png", "deadline_vs_load.png",
                 "utilization.png"):
        assert (folder / name).stat().st_size > 0, name
    runs = json.loads((folder / "results.json").read_text())["runs"]
    assert len(runs) == 4 and {r["policy"] for r in runs} == {"fifo", "srtf-oracle"}
    table = (folder / "results.md").read_text()
    assert "srtf-oracle *(oracle)*" in table and "| c10 |" in table
    for load in (0.5, 0.9):
        avg = {r["policy"]: r["avg_jct_s"] for r in runs if r["target_load"] == load}
        assert avg["srtf-oracle"] <= avg["fifo"]


def test_evaluate_rejects_unknown_keys(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIOS.replace("tick_s = 120.0", "tick = 120.0"))
    code, out = invoke("evaluate", "--scenarios", str(toml), "--no-progress")
    assert code != 0 and "unknown key(s) tick" in out and "tick_s" in out
    toml.write_text(SCENARIOS.replace('title = "tiny"', 'titel = "tiny"'))
    code, out = invoke("evaluate", "--scenarios", str(toml), "--no-progress")
    assert code != 0 and "[evaluate] unknown key(s) titel" in out


def test_deadline_plot_spread_over_equal_seeds(tmp_path: Path) -> None:
    """Three seeds with the same hit rate: their mean (0.10000000000000002) lies above each
    of them by rounding; the bars from the lowest to the highest seed must still draw."""
    from slurm_rl.sim import report

    runs = [{"trace": "t", "policy": p, "seed": s, "target_load": 0.5, "nodes": 1,
             "offered_load": 0.5, "deadline_hit_rate": 0.1, "_jct": [60.0, 120.0],
             "_util": ([0.0, 1.0], [0.5, 0.5])} for p in ("fifo", "edf") for s in (0, 1, 2)]
    written = report.plots(runs, tmp_path)
    assert (tmp_path / "deadline_vs_load.png") in written


def test_evaluate_both_elasticflow_forms_side_by_side(tmp_path: Path) -> None:
    """The drop form runs under its own name next to the default one; the jobs it drops are
    reported apart (results.json, the table's *dropped* column) and counted as misses."""
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIOS.replace('["fifo", "srtf-oracle"]',
                                      '["elasticflow", "elasticflow-drop"]')
                    .replace("loads = [0.5, 0.9]", "loads = [1.0]")
                    .replace("tick_s = 120.0", "tick_s = 120.0\nelastic_fraction = 1.0")
                    .replace('window = "0:60"', 'window = "0:200"'))
    code, out = invoke("evaluate", "--scenarios", str(toml), "--no-progress")
    assert code == 0, out
    folder = tmp_path / "out"
    runs = {r["policy"]: r for r in json.loads((folder / "results.json").read_text())["runs"]}
    kept, dropped = runs["elasticflow"], runs["elasticflow-drop"]
    assert kept["declined_dropped_jobs"] == 0 and kept["jobs"] == 200
    assert dropped["declined_dropped_jobs"] == dropped["declined"] > 0
    assert dropped["jobs"] + dropped["declined_dropped_jobs"] == 200
    rows = {line.split(" | ")[4]: line for line in (folder / "results.md").read_text()
            .splitlines() if line.startswith("| c10 |")}
    assert rows["elasticflow"].endswith(f"| {kept['declined']} | – |")
    assert rows["elasticflow-drop"].endswith(
        f"| {dropped['declined']} | {dropped['declined_dropped_jobs']} |")
