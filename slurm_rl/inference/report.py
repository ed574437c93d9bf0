"""Tables and plots of the inference sweep (markdown for docs/inference.md, PNG)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

RATIO_TICKS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0,
               100.0)
"""Where the sweep plot labels its log-scaled ratio axis."""


def cell_means(rows: list[dict[str, Any]], field: str = "mean_ms"
               ) -> dict[tuple[float, str, str], dict[str, float]]:
    """(gbps, mix, model) -> scheduler -> `field` averaged over seeds."""
    acc: dict[tuple[float, str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for r in rows:
        acc[(r["gbps"], r["mix"], r["model"])][r["scheduler"]].append(float(r[field]))
    return {k: {s: float(np.mean(v)) for s, v in d.items()} for k, d in acc.items()}


def sweep_table(rows: list[dict[str, Any]], held_out: tuple[str, ...]) -> str:
    """One line per cell: mean latency (ms, mean over seeds) per scheduler; the best in bold;
    DRM-DQL's ratio to vanilla DQL and to HEFT."""
    cells = cell_means(rows)
    p95 = cell_means(rows, "p95_ms")
    scheds = list(next(iter(cells.values())))
    head = ("| Gbit/s | mix | model | " + " | ".join(scheds)
            + " | drm/vanilla | drm/heft | drm p95/heft p95 |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for (gbps, mix, model), v in cells.items():
        best = min(v.values())
        vals = " | ".join(f"**{v[s]:.3g}**" if v[s] == best else f"{v[s]:.3g}" for s in scheds)
        name = model + (" (held out)" if model in held_out else "")
        out.append(f"| {gbps:g} | {mix} | {name} | {vals} | {v['drm-dql'] / v['vanilla-dql']:.3f}"
                   f" | {v['drm-dql'] / v['heft']:.3f} | "
                   f"{p95[(gbps, mix, model)]['drm-dql'] / p95[(gbps, mix, model)]['heft']:.3f} |")
    return "\n".join(out)


def win_counts(rows: list[dict[str, Any]], held_out: tuple[str, ...], tie: float = 0.005
               ) -> str:
    """Per group of cells: DRM-DQL's wins / ties (mean latencies within `tie`) / losses
    against each other scheduler, and the geometric-mean latency ratio."""
    cells = cell_means(rows)
    lines = []
    for label, keep in (("all cells", lambda m: True), ("training structures",
                                                         lambda m: m not in held_out),
                        ("held-out structures", lambda m: m in held_out)):
        sel = [v for (_, _, m), v in cells.items() if keep(m)]
        parts = []
        for other in [k for k in sel[0] if k != "drm-dql"]:
            r = [v["drm-dql"] / v[other] for v in sel]
            wins = sum(x < 1 - tie for x in r)
            losses = sum(x > 1 + tie for x in r)
            geo = float(np.exp(np.mean(np.log(r))))
            parts.append(f"vs {other}: {wins} better / {len(r) - wins - losses} within "
                         f"{tie:.1%} / {losses} worse (geo-mean ratio {geo:.3f})")
        lines.append(f"- {label} ({len(sel)}): DRM-DQL " + "; ".join(parts))
    return "\n".join(lines)


def curve_summary(rows: list[dict[str, Any]], baselines: dict[str, float]) -> str:
    """Per agent, over seeds: validation slowdown at each validation (mean, worst), and the
    first episode from which every later validation stays within 10 % of the best one."""
    out = []
    for agent in dict.fromkeys(r["agent"] for r in rows):
        rr = [r for r in rows if r["agent"] == agent]
        eps = sorted({int(r["episode"]) for r in rr})
        seeds = sorted({r["seed"] for r in rr})
        mean = [float(np.mean([r["validation_slowdown"] for r in rr if r["episode"] == e]))
                for e in eps]
        worst = [max(r["validation_slowdown"] for r in rr if r["episode"] == e) for e in eps]
        settle: list[str] = []
        for s in seeds:
            v = [r["validation_slowdown"] for r in rr if r["seed"] == s]
            best = min(v)
            k = next((i for i in range(len(v)) if all(x <= 1.1 * best for x in v[i:])), None)
            settle.append(str(eps[k]) if k is not None else "never (the last is off)")
        out.append(f"- {agent}: mean over seeds by episode "
                   + ", ".join(f"{e}: {m:.3g}" for e, m in zip(eps, mean, strict=True))
                   + f"; worst seed at any validation {max(worst):.3g}; best "
                   f"{min(r['validation_slowdown'] for r in rr):.3g}; stays within 10 % of its "
                   f"best from episode {', '.join(settle)} (seeds {', '.join(map(str, seeds))})")
    out.append("- baselines on the same validation episodes: "
               + ", ".join(f"{k} {v:.3g}" for k, v in baselines.items()))
    return "\n".join(out)


def dp_table(rows: list[dict[str, Any]]) -> str:
    scheds = [k for k in rows[0] if k not in ("gbps", "mix", "model", "dp_ms")]
    out = ["| Gbit/s | mix | model | DP optimum (ms) | " + " | ".join(f"{s} / DP" for s in scheds)
           + " |", "|" + "---|" * (4 + len(scheds))]
    for r in rows:
        out.append(f"| {r['gbps']:g} | {r['mix']} | {r['model']} | {r['dp_ms']:.3g} | "
                   + " | ".join(f"{r[s]:.3f}" for s in scheds) + " |")
    return "\n".join(out)


def plot_sweep(rows: list[dict[str, Any]], path: Path, held_out: tuple[str, ...]) -> None:
    """Mean latency relative to HEFT (geometric mean over mixes, models and seeds) against
    bandwidth, training and held-out structures side by side."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = cell_means(rows)
    scheds = list(next(iter(cells.values())))
    gbps = sorted({k[0] for k in cells})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (label, keep) in zip(axes, (("training structures", False),
                                        ("held-out structures", True)), strict=True):
        for s in scheds:
            ys = []
            for g in gbps:
                sel = [v for (gg, _, m), v in cells.items() if gg == g and (m in held_out) == keep]
                ys.append(float(np.exp(np.mean([np.log(v[s] / v["heft"]) for v in sel]))))
            ax.plot(gbps, ys, marker="o", label=s)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(RATIO_TICKS))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_xlabel("bandwidth (Gbit/s)")
        ax.set_title(label)
    axes[0].set_ylabel("mean latency / HEFT's (geo-mean)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def mix_model_grid(rows: list[dict[str, Any]]) -> str:
    """DRM-DQL / HEFT mean latency, averaged (geometric) over bandwidths: mix x model."""
    cells = cell_means(rows)
    mixes = sorted({k[1] for k in cells})
    models = list(dict.fromkeys(k[2] for k in cells))
    out = ["| mix | " + " | ".join(models) + " |", "|" + "---|" * (len(models) + 1)]
    for mix in mixes:
        vals = []
        for model in models:
            sel = [v for (_, mm, m), v in cells.items() if mm == mix and m == model]
            vals.append(f"{np.exp(np.mean([np.log(v['drm-dql'] / v['heft']) for v in sel])):.3f}")
        out.append(f"| {mix} | " + " | ".join(vals) + " |")
    return "\n".join(out)


def grid_cells(rows: list[dict[str, Any]], field: str = "mean_ms"
               ) -> dict[tuple[str, Any, str, float], dict[str, float]]:
    """(cluster, bandwidth, model, load) -> scheduler -> `field` averaged over seeds (the rows
    of `evaluate --grid`)."""
    acc: dict[tuple[str, Any, str, float], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for r in rows:
        acc[(str(r["cluster"]), r["gbps"], str(r["model"]), float(r["load"]))][
            r["scheduler"]].append(float(r[field]))
    return {k: {s: float(np.mean(v)) for s, v in d.items()} for k, d in acc.items()}


def _cell_label(key: tuple[str, Any, str, float]) -> str:
    cluster, gbps, model, load = key
    bw = f"{gbps:g} Gbit/s" if isinstance(gbps, float | int) else f"bandwidths from {gbps}"
    return f"cluster {cluster}, {bw}, {model}, load {load:g}"


def grid_summary(rows: list[dict[str, Any]], reference: str = "heft", tie: float = 0.005
                 ) -> str:
    """`evaluate --grid`'s report: per scheduler its worst cell against `reference` first,
    then the geometric-mean ratio and the better / tie / worse counts; then one line per cell
    (mean latency in ms, mean over seeds, the best in bold, and each ratio to `reference`)."""
    cells = grid_cells(rows)
    scheds = list(dict.fromkeys(r["scheduler"] for r in rows))
    others = [s for s in scheds if s != reference]
    seeds = sorted({int(r["seed"]) for r in rows})
    lines = [f"Mean latency over {reference}'s per cell (mean over seeds "
             f"{', '.join(map(str, seeds))}; above 1: slower than {reference}), worst cell "
             f"first, over {len(cells)} cells:"]
    for s in others:
        ratio = {k: v[s] / v[reference] for k, v in cells.items()}
        worst = max(ratio, key=lambda k: ratio[k])
        r = np.array(list(ratio.values()))
        better, worse = int((r < 1 - tie).sum()), int((r > 1 + tie).sum())
        lines.append(f"- {s}: worst {ratio[worst]:.3f} ({_cell_label(worst)}); geo-mean "
                     f"{float(np.exp(np.mean(np.log(r)))):.3f}; {better} better / "
                     f"{len(r) - better - worse} within {tie:.1%} / {worse} worse")
    dropped = sum(int(r["dropped"]) for r in rows)
    if dropped:
        lines.append(f"- {dropped} task(s) dropped in all (no device had the memory when they "
                     "arrived): see the dropped column of sweep.csv")
    head = ("| cluster | Gbit/s | model | load | " + " | ".join(f"{s} (ms)" for s in scheds)
            + "".join(f" | {s}/{reference}" for s in others) + " |")
    table = [head, "|" + "---|" * (head.count("|") - 1)]
    for (cluster, gbps, model, load), v in cells.items():
        best = min(v.values())
        vals = " | ".join(f"**{v[s]:.3g}**" if v[s] == best else f"{v[s]:.3g}" for s in scheds)
        bw = f"{gbps:g}" if isinstance(gbps, float | int) else str(gbps)
        table.append(f"| {cluster} | {bw} | {model} | {load:g} | {vals}"
                     + "".join(f" | {v[s] / v[reference]:.3f}" for s in others) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(table)


__all__ = ["cell_means", "sweep_table", "win_counts", "dp_table", "plot_sweep",
           "mix_model_grid", "grid_cells", "grid_summary"]
