"""`slurm-rl inference evaluate --grid FILE`: the grid file's one-line errors (nothing written),
a small grid run end to end, and the built-in sweep left as it was."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.inference import experiments
from slurm_rl.inference.profile import resolve, save
from slurm_rl.inference.schedulers import EarliestFinish, Scheduler, WholeModel

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GOOD = """\
models = ["mobilenet"]
loads = [0.5]
seeds = [1]
tasks = 4
schedulers = ["whole"]
bandwidths_gbps = [10]
[[cluster]]
preset = "gpu"
"""


def _evaluate(tmp_path: Path, text: str, *extra: str) -> tuple[int, str, Path]:
    grid = tmp_path / "grid.toml"
    grid.write_text(text)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["inference", "evaluate", "--grid", str(grid),
                                    "--out-dir", str(out), *extra])
    return res.exit_code, res.output, out


BAD = [
    ("colour = 1\n" + GOOD, "unknown key(s) colour (valid: bandwidths_gbps, cluster, loads"),
    (GOOD.replace("[10]", "[10, -1]"), "bandwidths_gbps: -1 is not a positive number"),
    (GOOD.replace("[10]", "[]"), "bandwidths_gbps: expected a non-empty array, got []"),
    (GOOD.replace("[10]", '["fast"]'), "bandwidths_gbps: 'fast' is not a positive number"),
    (GOOD.replace("loads = [0.5]", "loads = [0]"), "loads: 0 is not a number in (0, 10]"),
    (GOOD.replace("loads = [0.5]", "loads = [10.5]"), "loads: 10.5 is not a number in (0, 10]"),
    (GOOD.replace("loads = [0.5]", "loads = 0.5"), "loads: expected a non-empty array, got 0.5"),
    (GOOD.replace("seeds = [1]", "seeds = [1, 1]"), "seeds: [1, 1] lists a value twice"),
    (GOOD.replace("seeds = [1]", "seeds = [-2]"), "seeds: -2 is not a whole number >= 0"),
    (GOOD.replace("tasks = 4", "tasks = 0"), "tasks: 0 is not a whole number in 1..100000"),
    (GOOD.replace("tasks = 4", "tasks = 2.5"), "tasks: 2.5 is not a whole number"),
    (GOOD.replace('["whole"]', '["hefty"]'), "schedulers: 'hefty' is not one of drm-dql, "
                                             "vanilla-dql, heft, whole, lookahead, "
                                             "request-plan"),
    (GOOD.replace('["mobilenet"]', '["alexnet"]'),
     "models: alexnet: neither a shipped profile"),
    (GOOD.replace('models = ["mobilenet"]\n', ""), "models: missing"),
    (GOOD.replace('[[cluster]]\npreset = "gpu"\n', ""), "cluster: expected one or more "
                                                      "[[cluster]] tables, got None"),
    (GOOD.replace('preset = "gpu"', 'preset = "tpu"'),
     "[[cluster]] 0: preset: 'tpu' is not one of gpu, mixed, cpu"),
    (GOOD + 'colour = "red"\n', "[[cluster]] 0: unknown key(s) colour (valid: name, preset"),
    (GOOD + '[[cluster.device]]\ntype = "t4"\n',
     "[[cluster]] 0: give one of preset, file or [[cluster.device]] tables, not preset and "
     "device"),
    (GOOD + "[[cluster]]\n", "[[cluster]] 1: give one of preset, file or [[cluster.device]]"),
    (GOOD + '[[cluster]]\npreset = "gpu"\n', "[[cluster]] 1: name 'gpu' is an earlier"),
    (GOOD + '[[cluster]]\n[[cluster.device]]\ntype = "h100"\n',
     "[[cluster]] 1: device 0: type 'h100' is not one of"),
    (GOOD + '[[cluster]]\nbandwidth_gbps = -3\n[[cluster.device]]\ntype = "t4"\n',
     "[[cluster]] 1: bandwidth_gbps: -3 is not a positive finite number"),
    (GOOD.replace("bandwidths_gbps = [10]\n", ""),
     "[[cluster]] 0: no bandwidth_gbps or bandwidth_file, and the grid has no bandwidths_gbps"),
    (GOOD + '[[cluster]]\nfile = "none.toml"\n', "[[cluster]] 1: file: none.toml: cannot read"),
    (GOOD + '[[cluster]]\nfile = "c.toml"\nsource = 1\n',
     "[[cluster]] 1: source: not with file (the cluster file gives them)"),
    (GOOD + '[[cluster]]\nname = "tiny"\nbandwidth_gbps = 1\n[[cluster.device]]\n'
     "flops_per_s = 1e12\nmem_bytes_per_s = 1e11\nmemory_bytes = 1000\noverhead_s = 0\n",
     "[[cluster]] 1 (tiny): models: mobilenet: layer 0 (0) fits on no device's memory"),
    ("models = [\n", "not TOML"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_grid_errors_are_one_line_exit_2_and_write_nothing(tmp_path: Path, text: str,
                                                           message: str) -> None:
    (tmp_path / "c.toml").write_text('bandwidth_gbps = 5\n[[device]]\ntype = "t4"\n')
    code, output, out = _evaluate(tmp_path, text)
    assert code == 2, output
    err = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(err) == 1, output
    assert err[0].startswith(f"Error: Invalid value for --grid: {tmp_path / 'grid.toml'}: ")
    assert message in err[0], output
    assert "Traceback" not in output
    assert not out.exists()


def test_grid_and_its_options_conflict_and_agent_checkpoints_are_checked(tmp_path: Path
                                                                         ) -> None:
    code, output, out = _evaluate(tmp_path, GOOD, "--seeds", "2")
    assert code == 2 and "Error: --seeds: " in output and "gives seeds" in output, output
    assert not out.exists()
    code, output, out = _evaluate(tmp_path, GOOD.replace('["whole"]', '["drm-dql"]'),
                                  "--checkpoint-dir", str(tmp_path))
    assert code == 2 and "drm-dql-s1.pt is missing" in output, output
    assert not out.exists()
    code, output, out = _evaluate(tmp_path, GOOD.replace("tasks = 4\n", ""), "--tasks", "3")
    assert code == 0, output  # (what the grid leaves out, the options give)
    assert {r["scheduler"] for r in experiments.read_csv(out / "sweep.csv")} == {"heft",
                                                                                   "whole"}


def _reference_row(c: object, model: str, s: Scheduler, load: float, seed: int,
                   tasks: int) -> dict[str, object]:
    """The metrics the built-in sweep computes for one cell (`experiments._episode`), as the
    CSV writes them."""
    m = experiments._episode(c, resolve(model), s, tasks, load, seed)  # type: ignore[arg-type]
    return {k: f"{v:.6g}" if isinstance(v, float) else str(v) for k, v in m.items()}


def test_small_grid_end_to_end_heft_and_whole(tmp_path: Path) -> None:
    from slurm_rl.inference import cluster as cl

    save(resolve("resnet"), tmp_path / "my-net.json")  # a profile file, relative to the grid
    (tmp_path / "bw.csv").write_text("0,5\n5,0\n")
    (tmp_path / "site.toml").write_text('bandwidth_file = "bw.csv"\n[[device]]\ntype = "t4"\n'
                                        '[[device]]\ntype = "a100"\n')
    grid = """\
models = ["mobilenet", "my-net.json"]
loads = [0.4, 1.5]
seeds = [1, 2]
tasks = 5
schedulers = ["whole"]
bandwidths_gbps = [1, 40]
[[cluster]]
preset = "mixed"
[[cluster]]
name = "site"
file = "site.toml"
"""
    code, output, out = _evaluate(tmp_path, grid)
    assert code == 0, output
    with open(out / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    cells = [(c, g) for c, g in (("mixed", "1"), ("mixed", "40"), ("site", "bw.csv"))]
    expected = [(seed, c, g, model, load, sched)
                for seed in ("1", "2") for c, g in cells
                for model in ("mobilenet", "my-net.json") for load in ("0.4", "1.5")
                for sched in ("heft", "whole")]
    assert [(r["seed"], r["cluster"], r["gbps"], r["model"], r["load"], r["scheduler"])
            for r in rows] == expected
    assert list(rows[0]) == ["cluster", "gbps", "model", "load", "seed", "scheduler",
                             "mean_ms", "p95_ms", "throughput", "slowdown", "dropped"]
    # A preset cell is the built-in sweep's cell; a file cell is that cluster file.
    metrics = ["mean_ms", "p95_ms", "throughput", "slowdown", "dropped"]
    clusters = {("mixed", "40"): cl.make(cl.MIXES["mixed"], 40.0),
                ("site", "bw.csv"): cl.load(tmp_path / "site.toml")}
    for r in rows:
        if (r["cluster"], r["gbps"]) in clusters and r["model"] == "mobilenet":
            s = EarliestFinish() if r["scheduler"] == "heft" else WholeModel()
            assert {k: r[k] for k in metrics} == _reference_row(
                clusters[(r["cluster"], r["gbps"])], "mobilenet", s, float(r["load"]),
                int(r["seed"]), 5)
    # The report: the worst cell before the mean, then every cell with its labels.
    lines = output.splitlines()
    assert lines[0].startswith("Mean latency over heft's per cell (mean over seeds 1, 2; ")
    assert lines[0].endswith("worst cell first, over 12 cells:")
    mean: dict[tuple[str, ...], dict[str, list[float]]] = {}
    for r in rows:
        mean.setdefault((r["cluster"], r["gbps"], r["model"], r["load"]), {}).setdefault(
            r["scheduler"], []).append(float(r["mean_ms"]))
    ratio = {k: (sum(v["whole"]) / len(v["whole"])) / (sum(v["heft"]) / len(v["heft"]))
             for k, v in mean.items()}
    worst = max(ratio, key=lambda k: ratio[k])
    geo = math.exp(sum(math.log(x) for x in ratio.values()) / len(ratio))
    bw = f"{worst[1]} Gbit/s" if worst[1] != "bw.csv" else "bandwidths from bw.csv"
    assert lines[1].startswith(f"- whole: worst {ratio[worst]:.3f} (cluster {worst[0]}, {bw}, "
                               f"{worst[2]}, load {worst[3]}); geo-mean {geo:.3f}; ")
    table = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| cluster")]
    assert len(table) == 12
    assert "| site | bw.csv | my-net.json | 1.5 | " in output
    summary = (out / "summary.md").read_text()
    assert summary in output + "\n"
    # --report-only rewrites the same summary from sweep.csv.
    (out / "summary.md").unlink()
    res = CliRunner().invoke(main, ["inference", "evaluate", "--report-only",
                                    "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "summary.md").read_text() == summary
    assert sorted(p.name for p in out.iterdir()) == ["summary.md", "sweep.csv"]


def test_the_example_grid_parses() -> None:
    from slurm_rl.inference.grid import read_grid

    g = read_grid(REPO / "docs" / "inference" / "grid-example.toml")
    assert [(c.name, c.bandwidth) for c in g.clusters] == [
        ("mixed", 2.0), ("mixed", 25.0), ("example", "bandwidth.csv"), ("lab", 2.0),
        ("lab", 25.0)]
    assert g.schedulers == ("drm-dql", "vanilla-dql", "heft", "whole", "lookahead",
                            "request-plan", "stream-plan")


def test_builtin_sweep_rows_unchanged() -> None:
    """The built-in grid (no --grid) gives the rows it gave before grid files existed: heft
    and whole, seed 1, 4 tasks, load 0.6, recorded from the code before that change."""
    def scheds(seed: int) -> dict[str, Scheduler]:
        return {"heft": EarliestFinish(), "whole": WholeModel()}

    rows = experiments.sweep(scheds, [1], 4, 0.6)
    got = [{k: f"{v:.6g}" if isinstance(v, float) else str(v) for k, v in r.items()}
           for r in rows]
    with open(HERE / "data" / "sweep-heft-whole-s1-t4.csv", newline="") as fh:
        recorded = list(csv.DictReader(fh))
    assert len(recorded) == 90
    assert got == recorded


def test_profile_error_in_a_grid_names_the_layer(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"format": "slurm-rl-profile/1",
                                                   "model": "m", "input_bytes": 1,
                                                   "layers": [{"name": "a"}]}))
    code, output, out = _evaluate(tmp_path, GOOD.replace('["mobilenet"]', '["bad.json"]'))
    assert code == 2 and "models: " in output and "layer 0: missing" in output, output
    assert "torch module" not in output  # (the file is there: its fault is the message)
    assert not out.exists()
