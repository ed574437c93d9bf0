"""The evaluation's Markdown table and matplotlib plots."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Key = tuple[str, float | None, int, str]
"""(trace, target load, nodes, policy)."""


def _group(runs: Sequence[dict[str, Any]]) -> dict[Key, list[dict[str, Any]]]:
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["trace"], r["target_load"], r["nodes"], r["policy"])].append(r)
    return groups


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def _h(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 3600:.2f}"


def markdown_table(runs: Sequence[dict[str, Any]], title: str, restarts: str = "") -> str:
    """One row per trace x load x policy, means over seeds. JCTs in hours. `restarts`: how
    running jobs were restarted (EngineConfig.restarts_line), said under the title."""
    lines = [
        f"## {title}", "",
        *([f"{restarts[:1].upper()}{restarts[1:]}.", ""] if restarts else []),
        "JCT figures in hours, means over seeds; *oracle* policies read true durations "
        "(references, not schedulers).", "",
        "| trace | target load | offered load | nodes | policy | seeds | avg JCT | p50 | p95 | "
        "p99 | makespan | GPU util | deadline hit | declined | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (trace, load, nodes, policy), rows in sorted(
            _group(runs).items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2])):
        hit = _mean(rows, "deadline_hit_rate")
        name = f"{policy} *(oracle)*" if rows[0]["oracle"] else policy
        offered = statistics.fmean(r["offered_load"] for r in rows)
        lines.append(
            f"| {trace} | {'–' if load is None else load} | {offered:.2f} | {nodes} | {name} | "
            f"{len(rows)} | "
            f"{_h(_mean(rows, 'avg_jct_s'))} | {_h(_mean(rows, 'p50_jct_s'))} | "
            f"{_h(_mean(rows, 'p95_jct_s'))} | {_h(_mean(rows, 'p99_jct_s'))} | "
            f"{_h(_mean(rows, 'makespan_s'))} | {_mean(rows, 'gpu_utilization') or 0:.3f} | "
            + ("–" if hit is None else f"{hit:.3f}") + " | "
            + ("–" if (dec := _mean(rows, "declined")) is None else f"{dec:.0f}") + " | "
            + ("–" if not (drop := _mean(rows, "declined_dropped_jobs")) else f"{drop:.0f}")
            + " |")
    lines.append("")
    lines.append("*deadline hit*: deadline jobs that ended by their deadline over all deadline "
                 "jobs (a declined job counts as a miss unless it still ends in time); "
                 "*declined*: deadline jobs the policy declined at admission (– : a policy "
                 "that declines none); *dropped*: of those, the jobs it dropped, which never "
                 "ran: each a miss, and not in the JCT figures, which are of the jobs that "
                 "ran (– : none dropped).")
    lines.append("*offered load*: the trace's mean GPU demand over the cluster's GPUs. It falls "
                 "short of the target when the cluster must be larger to hold the widest job.")
    return "\n".join(lines) + "\n"


def plots(results: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """jct_cdf.png and utilization.png (each trace at its highest load, first seed; utilisation
    averaged over 1/300 of the run) and deadline_vs_load.png (traces with deadlines, means
    over seeds, bars from the lowest to the highest seed). One colour per policy throughout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = sorted({r["trace"] for r in results})
    policy_names = sorted({r["policy"] for r in results})
    color = {p: f"C{i % 10}" for i, p in enumerate(policy_names)}
    seed0 = min(r["seed"] for r in results)
    top = {t: max(((r["target_load"], r["nodes"]) for r in results if r["trace"] == t),
                  key=lambda size: (size[0] or 0.0, size[1]))
           for t in traces}
    written: list[Path] = []

    def figure(name: str, n: int) -> tuple[Any, list[Any]]:
        fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
        return fig, list(axes[0])

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    fig, axes = figure("jct_cdf", len(traces))
    for ax, trace in zip(axes, traces, strict=True):
        for r in results:
            if (r["trace"], r["seed"]) == (trace, seed0) and (r["target_load"],
                                                               r["nodes"]) == top[trace]:
                jct = [max(x / 3600, 1e-3) for x in r["_jct"]]
                ys = [(i + 1) / len(jct) for i in range(len(jct))]
                ax.plot(jct, ys, label=r["policy"], lw=1.2, color=color[r["policy"]])
        ax.set_xscale("log")
        ax.set_xlabel("JCT (hours, log)")
        ax.set_ylabel("share of jobs")
        ax.set_title(f"{trace}: JCT CDF (load {_load_label(results, trace, top[trace])})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    save(fig, "jct_cdf.png")

    dl_traces = [t for t in traces
                 if any(r["trace"] == t and r["deadline_hit_rate"] is not None for r in results)]
    if dl_traces:
        fig, axes = figure("deadline_vs_load", len(dl_traces))
        for ax, trace in zip(axes, dl_traces, strict=True):
            for p in policy_names:
                pts: dict[float, list[float]] = defaultdict(list)
                for r in results:
                    hit = r["deadline_hit_rate"]
                    if r["trace"] == trace and r["policy"] == p and hit is not None:
                        pts[round(r["offered_load"], 3)].append(hit)
                xs = sorted(pts)
                mean = [statistics.fmean(pts[x]) for x in xs]
                ax.plot(xs, mean, marker="o", label=p, color=color[p])
                if any(len(pts[x]) > 1 for x in xs):  # the spread over seeds: min to max
                    low = [max(0.0, m - min(pts[x])) for m, x in zip(mean, xs, strict=True)]
                    high = [max(0.0, max(pts[x]) - m) for m, x in zip(mean, xs, strict=True)]
                    ax.errorbar(xs, mean, yerr=[low, high], fmt="none", ecolor=color[p],
                                capsize=3, lw=1)
            ax.set_xlabel("offered load")
            ax.set_ylabel("deadline hit rate")
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{trace}: deadlines met")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        save(fig, "deadline_vs_load.png")

    fig, axes = figure("utilization", len(traces))
    for ax, trace in zip(axes, traces, strict=True):
        for r in results:
            if (r["trace"], r["seed"]) == (trace, seed0) and (r["target_load"],
                                                               r["nodes"]) == top[trace]:
                times, util = r["_util"]
                if times:
                    t0 = times[0]
                    ax.plot([(t - t0) / 86400 for t in times], util, label=r["policy"], lw=1,
                            color=color[r["policy"]])
        ax.set_xlabel("days from first submission")
        ax.set_ylabel("GPUs busy (share)")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{trace}: utilisation (load {_load_label(results, trace, top[trace])})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    save(fig, "utilization.png")
    return written


def _load_label(results: Sequence[dict[str, Any]], trace: str,
                size: tuple[float | None, int]) -> str:
    for r in results:
        if r["trace"] == trace and (r["target_load"], r["nodes"]) == size:
            return f"{r['offered_load']:.2f}"
    return "?"
