"""Every inference scheduler on held-out settings (docs/inference.md "Held-out evaluation").

    D=slurm_rl/data/inference
    .venv/bin/python benchmarks/inference_heldout.py --cells 160 --csv heldout.csv \
        --drm $D/drm-dql-s1.pt,$D/drm-dql-s2.pt --vanilla $D/vanilla-dql-s1.pt
    .venv/bin/python benchmarks/inference_heldout.py --dev --cells 120 --following 1,2,3

Each cell is one setting of `heldout.HELD_OUT_SEEDS` (a seed no trainer draws; 2-16 devices
from edge to H100-class, 0.1-400 Gbit/s, shipped and generated structures, half of the cells on
structures training never sees, load 0.3-0.95): one stream of `--tasks` tasks of its structure
(stream seed = the cell's seed), the same stream for every scheduler. A cell's ratio is the
scheduler's mean latency over HEFT's. `--drm` / `--vanilla` take one or more checkpoints
(comma-separated): each runs on every cell as its own row (`drm-dql-s1`, ...), and the summary
row of the agent is over all of them. Printed per scheduler, worst geo-mean first: the geo-mean
ratio, the worst cell, and how many cells are better / within 0.5 % / worse than HEFT; then,
with `--breakdown`, where each scheduler row wins, ties and loses: its geo-mean ratio (cells,
worst) by structure, bandwidth band, device count and load band. `--dev` draws the cells from
the development range instead (`heldout.DEV_SEEDS`, the held-out structure pool), where the
heuristics' settings are tuned (`--following`: the stream plan's followers, a row per count).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slurm_rl.inference import heldout as ho  # noqa: E402
from slurm_rl.inference.planner import FOLLOWING  # noqa: E402
from slurm_rl.inference.schedulers import (  # noqa: E402
    EarliestFinish,
    Lookahead,
    RequestPlan,
    Scheduler,
    StreamPlan,
    WholeModel,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim, StreamConfig  # noqa: E402

TIE = 0.005


@dataclass(frozen=True, kw_only=True)
class Summary:
    scheduler: str
    cells: int
    geo_mean: float
    worst: float
    worst_seed: int
    better: int
    tie: int
    worse: int


def summarise(rows: Sequence[dict[str, Any]]) -> list[Summary]:
    """Rows (cell seed, scheduler, group, ratio) -> one Summary per group (an agent's
    checkpoints pooled), worst geo-mean first."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        groups.setdefault(str(r["group"]), []).append((int(r["seed"]), float(r["ratio"])))
    out = []
    for g, cells in groups.items():
        ratios = [x for _, x in cells]
        seed, worst = max(cells, key=lambda c: c[1])
        out.append(Summary(scheduler=g, cells=len(cells),
                           geo_mean=math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
                           worst=worst, worst_seed=seed,
                           better=sum(x < 1 - TIE for x in ratios),
                           tie=sum(1 - TIE <= x <= 1 + TIE for x in ratios),
                           worse=sum(x > 1 + TIE for x in ratios)))
    return sorted(out, key=lambda s: (-s.geo_mean, s.scheduler))


def head_to_head(rows: Sequence[dict[str, Any]], a: str, b: str) -> tuple[int, int, int]:
    """Cells (per checkpoint seed pairing by position) where scheduler row `a` is better /
    within 0.5 % / worse than `b`."""
    by: dict[tuple[int, str], float] = {(int(r["seed"]), str(r["scheduler"])): float(r["ratio"])
                                        for r in rows}
    seeds = sorted({s for s, _ in by})
    pairs = [(by[s, a], by[s, b]) for s in seeds if (s, a) in by and (s, b) in by]
    return (sum(x < y * (1 - TIE) for x, y in pairs),
            sum(y * (1 - TIE) <= x <= y * (1 + TIE) for x, y in pairs),
            sum(x > y * (1 + TIE) for x, y in pairs))


def run_cells(settings: Sequence[ho.Setting], schedulers: dict[str, tuple[str, Scheduler]],
              tasks: int) -> list[dict[str, Any]]:
    """One row per cell x scheduler (name -> (group, scheduler)); heft must be among them."""
    rows = []
    for s in settings:
        lat: dict[str, float] = {}
        for name, (_, sched) in schedulers.items():
            if isinstance(sched, WholeModel):
                sched = WholeModel()
            sim = InferenceSim(s.cluster, [s.profile],
                               StreamConfig(tasks=tasks, load=s.load, seed=s.seed))
            lat[name] = metrics(run_episode(sim, sched), sim.dropped).mean_s
        for name, (group, _) in schedulers.items():
            rows.append({"seed": s.seed, "devices": s.cluster.n, "classes": "+".join(
                sorted(set(s.classes))), "gbps": round(s.gbps, 3), "structure": s.structure,
                "held_out_structure": s.structure in ho.HELD_OUT_STRUCTURES,
                "load": round(s.load, 3), "scheduler": name, "group": group,
                "mean_ms": lat[name] * 1e3, "ratio": lat[name] / lat["heft"]})
    return rows


BANDS: dict[str, tuple[str, tuple[float, ...], tuple[str, ...]]] = {
    "structure": ("structure", (), ()),
    "bandwidth": ("gbps", (1.0, 10.0, 100.0), ("<1 Gbit/s", "1-10", "10-100", ">=100")),
    "devices": ("devices", (4.5, 9.5), ("2-4", "5-9", "10-16")),
    "load": ("load", (0.5, 0.75), ("<0.5", "0.5-0.75", ">=0.75")),
}
"""How `breakdown` groups cells: the row field and, for numbers, the band edges and names."""


def breakdown(rows: Sequence[dict[str, Any]], scheduler: str) -> dict[str, dict[str, tuple[
        float, int, float]]]:
    """For one scheduler row: per grouping (BANDS) and group, (geo-mean ratio, cells, worst)."""
    out: dict[str, dict[str, tuple[float, int, float]]] = {}
    mine = [r for r in rows if r["scheduler"] == scheduler]
    for name, (field, edges, labels) in BANDS.items():
        groups: dict[str, list[float]] = {}
        for r in mine:
            if edges:
                v = float(r[field])
                key = labels[sum(v >= e for e in edges)]
            else:
                key = str(r[field])
            groups.setdefault(key, []).append(float(r["ratio"]))
        order = list(labels) if edges else sorted(groups)
        out[name] = {k: (math.exp(sum(math.log(x) for x in groups[k]) / len(groups[k])),
                         len(groups[k]), max(groups[k])) for k in order if k in groups}
    return out


def table(summary: Sequence[Summary]) -> str:
    lines = [f"{'scheduler':<14}{'cells':>6}{'geo-mean':>10}{'worst':>8}  (cell)      "
             f"better/tie/worse vs heft"]
    for s in summary:
        lines.append(f"{s.scheduler:<14}{s.cells:>6}{s.geo_mean:>10.3f}{s.worst:>8.2f}  "
                     f"({s.worst_seed})  {s.better}/{s.tie}/{s.worse}")
    return "\n".join(lines)


def _agents(arg: str, group: str) -> dict[str, tuple[str, Scheduler]]:
    if not arg:
        return {}
    from slurm_rl.inference import dqn

    out: dict[str, tuple[str, Scheduler]] = {}
    for k, p in enumerate(arg.split(",")):
        net, _ = dqn.load(p)
        name = f"{group}-{k + 1}" if "," in arg else group
        out[name] = (group, dqn.QScheduler(net, name))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=160)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--start", type=int, default=0,
                    help="skip this many held-out seeds (another draw of cells)")
    ap.add_argument("--drm", default="", help="DRM-DQL checkpoint(s), comma-separated")
    ap.add_argument("--vanilla", default="", help="vanilla DQL checkpoint(s), comma-separated")
    ap.add_argument("--following", default=str(FOLLOWING),
                    help="the stream plan's followers: one count, or several comma-separated "
                         f"(a row each; the rows of counts other than {FOLLOWING} are named "
                         "stream-plan-kK)")
    ap.add_argument("--dev", action="store_true",
                    help="cells of the development range (heldout.DEV_SEEDS) instead")
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--breakdown", action="store_true",
                    help="also each scheduler's geo-mean by structure, bandwidth, devices, load")
    a = ap.parse_args(argv)
    if a.cells < 1 or a.tasks < 1:
        print("inference_heldout: --cells and --tasks must be >= 1", file=sys.stderr)
        return 2
    try:
        follow = [int(k) for k in a.following.split(",")]
        if min(follow) < 0:
            raise ValueError
    except ValueError:
        print(f"inference_heldout: --following: {a.following!r}, not counts >= 0 separated by "
              "commas", file=sys.stderr)
        return 2
    scheds: dict[str, tuple[str, Scheduler]] = {
        "heft": ("heft", EarliestFinish()), "lookahead": ("lookahead", Lookahead()),
        "whole": ("whole", WholeModel()),
        "request-plan": ("request-plan", RequestPlan())}
    for k in follow:
        name = "stream-plan" if k == FOLLOWING else f"stream-plan-k{k}"
        scheds[name] = (name, StreamPlan(k))
    try:
        scheds |= _agents(a.drm, "drm-dql") | _agents(a.vanilla, "vanilla-dql")
    except ValueError as exc:  # CheckpointError: one line naming the file
        print(f"inference_heldout: {exc}", file=sys.stderr)
        return 2
    drawn = (ho.settings(ho.DEV_SEEDS, a.cells, a.start, held_out=True) if a.dev
             else ho.settings(ho.HELD_OUT_SEEDS, a.cells, a.start))
    rows = run_cells(drawn, scheds, a.tasks)
    print(table(summarise(rows)))
    drm = [n for n, (g, _) in scheds.items() if g == "drm-dql"]
    van = [n for n, (g, _) in scheds.items() if g == "vanilla-dql"]
    for d, v in zip(drm, van, strict=False):
        b, t, w = head_to_head(rows, d, v)
        print(f"{d} vs {v}: better/tie/worse {b}/{t}/{w}")
    if a.breakdown:
        for name in scheds:
            if name == "heft":
                continue
            for by, groups in breakdown(rows, name).items():
                cells = "; ".join(f"{k} {g:.3f} ({n}, worst {w:.2f})"
                                  for k, (g, n, w) in groups.items())
                print(f"{name} by {by}: {cells}")
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
            wr.writeheader()
            for r in rows:
                wr.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in r.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
