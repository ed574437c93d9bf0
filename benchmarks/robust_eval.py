"""The robustness suite (docs/eval/robust.toml): a learned policy against the heuristics on
workload families, ITP hold-out clusters, loads and time-limit models it was not tuned on.

Per cell (workload x load x time-limit model) and policy: mean and p95 JCT, the mean wait of
jobs that run under 10 minutes, GPU utilisation, requeues and guard switches. The target's
mean JCT over the best heuristic's is the cell's ratio; the report prints the WORST CELL
FIRST, then the mean, apart for the cells in the target's training distribution and those
held out of it, and plots the ratio of every cell. Traces are generated into OUT/traces on
every run (`slurm-rl trace generate` makes the same files).

    .venv/bin/python benchmarks/robust_eval.py [--suite docs/eval/robust.toml] [--out DIR]
        [--workers 2] [--quick]

`--quick`: the first load and time-limit model only (a smoke run).

A cluster is sized for a load as `nodes_for_load` does: the fewest nodes whose capacity keeps
mean demand at or under the load, but never fewer than the widest job needs. Where that floor
(or rounding) gives several loads the same node count, they are one cluster: it runs once, as
one row labelled with every load it stands for, and counts once in the worst, mean and
above-1 figures. Each row shows its node count and its effective load (mean demand over the
capacity it was given).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_rl import policies
from slurm_rl.sim.config import EngineConfig, from_table
from slurm_rl.sim.run import Sizing, load_jobs, offered_load, resolve_trace_path, simulate
from slurm_rl.sim.trace import TraceJob, nodes_for_load
from slurm_rl.sim.workloads import generate, write_csv

SHORT_S = 600.0


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    path: str
    format: str
    window: str | None
    gpus_per_node: int
    held_out: bool
    nodes: tuple[int, ...] = ()
    """Fixed cluster sizes to run instead of the suite's loads (a family whose tail of runs
    of weeks makes load-based sizing meaningless)."""


@dataclass(frozen=True, kw_only=True)
class Size:
    """One cluster a workload runs on: its label in the report, its nodes, its effective load."""

    label: float | str
    """The target load; "N nodes" for a fixed size; for several loads sized alike, all of
    them and why, e.g. "1.0, 1.3 (same 20 nodes: the widest job)"."""
    nodes: int
    effective_load: float
    """Mean demand over the capacity of `nodes` nodes."""


def sizes_for(jobs: Sequence[TraceJob], gpus_per_node: int, loads: Sequence[float] = (),
              nodes: Sequence[int] = ()) -> list[Size]:
    """The distinct clusters for `loads` (or the fixed `nodes`), in the order given: loads
    whose sizing gives the same node count are merged into one Size."""
    if nodes:
        return [Size(label=f"{n} nodes", nodes=n,
                     effective_load=offered_load(jobs, n, gpus_per_node)) for n in nodes]
    by_nodes: dict[int, list[float]] = {}
    for load in loads:
        by_nodes.setdefault(nodes_for_load(jobs, load, gpus_per_node), []).append(load)
    widest = math.ceil(max((j.gpus for j in jobs), default=1) / gpus_per_node)
    out = []
    for n, group in by_nodes.items():
        label: float | str = group[0]
        if len(group) > 1:
            why = ": the widest job" if n == widest else ""
            label = f"{', '.join(str(x) for x in group)} (same {n} nodes{why})"
        out.append(Size(label=label, nodes=n,
                        effective_load=offered_load(jobs, n, gpus_per_node)))
    return out


@dataclass(frozen=True, kw_only=True)
class Run:
    workload: Workload
    size: Size
    limits: str
    engine: dict[str, Any]
    policy: str
    options: dict[str, Any]
    seed: int


def run_one(r: Run) -> dict[str, Any]:
    jobs = load_jobs(r.workload.path, r.workload.format, r.workload.window)
    engine = from_table(EngineConfig, {**r.engine, "nodes": 1,
                                       "gpus_per_node": r.workload.gpus_per_node})
    policy = policies.make(r.policy, **r.options)
    t = time.process_time()
    sizing = Sizing(gpus_per_node=r.workload.gpus_per_node, nodes=r.size.nodes)
    res = simulate(jobs, policy, sizing, engine=engine, seed=r.seed)
    from slurm_rl.sim.metrics import gpu_utilization, percentile

    jct = sorted(j.end - j.submit for j in res.jobs)
    short = [j.start - j.submit for j in res.jobs if j.trace_duration < SHORT_S]
    return {"workload": r.workload.name, "held_out": r.workload.held_out, "load": r.size.label,
            "nodes": r.size.nodes, "effective_load": r.size.effective_load, "limits": r.limits,
            "policy": r.policy, "seed": r.seed,
            "mean_jct_s": statistics.mean(jct), "p95_jct_s": percentile(jct, 95),
            "short_wait_s": statistics.mean(short) if short else None,
            "utilisation": gpu_utilization(res), "requeues": res.preemptions,
            "guard_switches": res.guard_switches, "cpu_s": time.process_time() - t}


def read_suite(path: Path, out: Path) -> tuple[dict[str, Any], list[Workload],
                                               list[tuple[str, dict[str, Any]]]]:
    with path.open("rb") as fh:
        doc = tomllib.load(fh)
    suite = doc["robust"]
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    workloads = []
    for f in doc.get("family", []):
        # Written again on every run (it takes well under a second): a trace kept from an
        # earlier run would outlive a change to its family's generator.
        p = traces / f"{f['name']}-{suite['jobs']}-seed{f.get('seed', 0)}.csv"
        write_csv(generate(f["name"], suite["jobs"], f.get("seed", 0)), str(p))
        workloads.append(Workload(name=f["name"], path=str(p), format="itp", window=None,
                                  gpus_per_node=f["gpus_per_node"],
                                  held_out=f.get("held_out", True),
                                  nodes=tuple(f.get("nodes", ()))))
    for t in doc.get("trace", []):
        workloads.append(Workload(name=t["name"], path=str(resolve_trace_path(t["path"])),
                                  format=t["format"], window=t.get("window"),
                                  gpus_per_node=t["gpus_per_node"],
                                  held_out=t.get("held_out", True)))
    limits = [(t.pop("name"), {"time_limit": t}) for t in
              (dict(x) for x in doc["time_limit"])]
    return {**suite, "engine": doc.get("engine", {}),
            "policy_options": doc.get("policy_options", {})}, workloads, limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=Path("docs/eval/robust.toml"))
    ap.add_argument("--out", type=Path, default=None, help="default: the suite's out, beside it")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", action="append", default=[], metavar="WORKLOAD",
                    help="run only these workloads, keeping the other rows of OUT/results.json")
    args = ap.parse_args()
    out = args.out or args.suite.parent / tomllib.loads(args.suite.read_text())["robust"]["out"]
    suite, workloads, limits = read_suite(args.suite, out)
    kept: list[dict[str, Any]] = []
    if args.only:
        unknown = sorted(set(args.only) - {w.name for w in workloads})
        if unknown:
            ap.error(f"--only: unknown workload(s) {', '.join(unknown)}")
        workloads = [w for w in workloads if w.name in args.only]
        old = out / "results.json"
        if old.exists():
            kept = [r for r in json.loads(old.read_text()) if r["workload"] not in args.only]
    loads = suite["loads"][:1] if args.quick else suite["loads"]
    limits = limits[:1] if args.quick else limits
    def sizes(w: Workload) -> list[Size]:
        jobs = load_jobs(w.path, w.format, w.window)
        return sizes_for(jobs, w.gpus_per_node, loads, w.nodes[:1] if args.quick else w.nodes)

    runs = [Run(workload=w, size=size, limits=name, engine={**suite["engine"], **lim},
                policy=p, options=suite["policy_options"].get(p, {}), seed=s)
            for w in workloads for size in sizes(w) for name, lim in limits
            for p in suite["policies"] for s in suite.get("seeds", [0])]
    print(f"{len(runs)} runs ({len(workloads)} workloads x up to {len(loads)} loads or sizes x "
          f"{len(limits)} time-limit models x {len(suite['policies'])} policies), "
          f"{args.workers} workers", file=sys.stderr, flush=True)
    rows: list[dict[str, Any]] = list(kept)
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for i, row in enumerate(pool.map(run_one, runs), 1):
            rows.append(row)
            if i % 20 == 0 or i == len(runs):  # (in order: a slow run holds the count)
                print(f"  {i}/{len(runs)} runs, {time.time() - t0:.0f} s", file=sys.stderr,
                      flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    report = render(rows, suite)
    (out / "results.md").write_text(report)
    plot(rows, suite, out / "ratio.png")
    print(report)


def cells(rows: list[dict[str, Any]], suite: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell: each policy's metrics (mean over seeds) and the target's ratio."""
    by: dict[tuple[str, float | str, str], dict[str, list[dict[str, Any]]]] = {}
    held: dict[str, bool] = {}
    for r in rows:
        by.setdefault((r["workload"], r["load"], r["limits"]), {}).setdefault(
            r["policy"], []).append(r)
        held[r["workload"]] = r["held_out"]
    out = []
    for (w, load, lim), per in by.items():
        mean = {p: {k: _mean([x[k] for x in rs]) for k in
                    ("mean_jct_s", "p95_jct_s", "short_wait_s", "utilisation", "requeues",
                     "guard_switches")} for p, rs in per.items()}
        best_name = min(suite["heuristics"], key=lambda p: mean[p]["mean_jct_s"])
        ratio = mean[suite["target"]]["mean_jct_s"] / mean[best_name]["mean_jct_s"]
        first = per[best_name][0]
        out.append({"workload": w, "load": load, "limits": lim, "held_out": held[w],
                    "nodes": first.get("nodes"), "effective_load": first.get("effective_load"),
                    "best": best_name, "ratio": ratio, "policies": mean})
    out.sort(key=lambda c: -c["ratio"])
    return out


def _mean(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def render(rows: list[dict[str, Any]], suite: dict[str, Any]) -> str:
    cs = cells(rows, suite)
    target = suite["target"]
    lines = [f"# {suite.get('title', 'Robustness suite')}", ""]

    def block(label: str, part: list[dict[str, Any]]) -> None:
        if not part:
            return
        worst = part[0]
        rs = [c["ratio"] for c in part]
        lines.append(f"## {label}: {len(part)} cells")
        lines.append("")
        lines.append(f"**Worst cell: {target} / best heuristic = {worst['ratio']:.3f}** "
                     f"({worst['workload']}, load {worst['load']}, limits {worst['limits']}; "
                     f"best heuristic {worst['best']}). Mean ratio {statistics.mean(rs):.3f}; "
                     f"cells above 1.00: {sum(r > 1.0 for r in rs)}.")
        lines.append("")
        pols = suite["policies"]
        lines.append("| workload | load | nodes | effective load | limits | ratio | best | "
                     + " | ".join(
            f"{p} JCT h" for p in pols) + f" | {target} p95 h | {target} short wait min | "
            f"best short wait min | {target} util | {target} requeues | guard switches |")
        lines.append("|---|---|---|---|---|---|---|" + "---|" * len(pols)
                     + "---|---|---|---|---|---|")
        for c in part:
            m = c["policies"]
            t, b = m[target], m[c["best"]]
            lines.append(
                f"| {c['workload']} | {c['load']} | {_count(c['nodes'])} | "
                f"{_share(c['effective_load'])} | {c['limits']} | {c['ratio']:.3f} | "
                f"{c['best']} | " + " | ".join(f"{m[p]['mean_jct_s'] / 3600:.2f}" for p in pols)
                + f" | {t['p95_jct_s'] / 3600:.1f} | {_min(t['short_wait_s'])} | "
                f"{_min(b['short_wait_s'])} | {t['utilisation']:.3f} | {t['requeues']:.0f} | "
                f"{_count(t['guard_switches'])} |")
        lines.append("")

    block("Held out of training (families and ITP clusters the checkpoint never saw)",
          [c for c in cs if c["held_out"]])
    block("In the training distribution", [c for c in cs if not c["held_out"]])
    return "\n".join(lines)


def _count(n: float | None) -> str:
    return "-" if n is None else f"{n:.0f}"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _min(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f}"


def plot(rows: list[dict[str, Any]], suite: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = sorted(cells(rows, suite), key=lambda c: (c["workload"], c["limits"], str(c["load"])))
    fig, ax = plt.subplots(figsize=(max(8, len(cs) * 0.28), 4.5))
    colors = ["tab:red" if c["ratio"] > 1.0 else "tab:blue" for c in cs]
    ax.bar(range(len(cs)), [c["ratio"] for c in cs], color=colors)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(cs)))
    ax.set_xticklabels([f"{c['workload']} {c['load']} {c['limits']}" for c in cs],
                       rotation=90, fontsize=7)
    ax.set_ylabel(f"{suite['target']} mean JCT / best heuristic")
    ax.set_title("Per cell (red: worse than the best heuristic)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
