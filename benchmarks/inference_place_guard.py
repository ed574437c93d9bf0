"""One model on an idle cluster (`slurm-rl inference place`, `slurm-rl plan`): how each
checkpoint's own plan compares with the request plan's, and what the guard leaves
(docs/inference.md, "The placement guard").

Draws --cells held-out settings (`heldout.HELD_OUT_SEEDS`: 2-16 devices from edge to
H100-class, 0.1-400 Gbit/s, half of them on structures training never sees), places each
setting's model alone on its cluster with every checkpoint (noise 0: one request on an idle
cluster is what the cost model predicts), and prints per checkpoint the ratio of the predicted
latency to the request plan's: better / tie / worse (below 0.995, within 0.5 %, above 1.005),
the geometric mean, the worst cell and the cells above 1.05x, without the guard and with it,
and how often the guard replaced the agent's plan. Also the CPU time of a guarded placement
over an unguarded one.

    .venv/bin/python benchmarks/inference_place_guard.py                     # shipped checkpoints
    .venv/bin/python benchmarks/inference_place_guard.py --cells 100 --checkpoint A.pt,B.pt
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from slurm_rl.inference import heldout, plan
from slurm_rl.inference.experiments import DATA

SHIPPED = tuple(DATA / f"{a}-s{k}.pt" for a in ("drm-dql", "vanilla-dql") for k in (1, 2, 3))


def _summary(ratios: list[float]) -> str:
    better = sum(r < 0.995 for r in ratios)
    worse = sum(r > 1.005 for r in ratios)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return (f"{better:4d} / {len(ratios) - better - worse:4d} / {worse:4d}  geo {geo:.3f}  "
            f"worst {max(ratios):6.2f}x  >1.05x {sum(r > 1.05 for r in ratios):3d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=300)
    ap.add_argument("--checkpoint", default=",".join(str(p) for p in SHIPPED),
                    help="comma-separated checkpoints (default: the six shipped ones)")
    args = ap.parse_args()
    cells = heldout.settings(heldout.HELD_OUT_SEEDS, args.cells)
    ref = [plan.place(s.profile, s.cluster, "request-plan").latency_s for s in cells]
    print(f"{len(cells)} held-out settings, one model alone on an idle cluster; ratio to the "
          "request plan's predicted latency; better / tie / worse, geo-mean, worst")
    for path in (Path(p) for p in args.checkpoint.split(",")):
        agent = plan.scheduler_for("drm-dql", path)
        own, kept, acted = [], [], 0
        cpu_own = cpu_kept = 0.0
        for s, r in zip(cells, ref, strict=True):
            t0 = time.process_time()
            a = plan.place(s.profile, s.cluster, agent, guard=False)
            t1 = time.process_time()
            g = plan.place(s.profile, s.cluster, agent)
            t2 = time.process_time()
            cpu_own += t1 - t0
            cpu_kept += t2 - t1
            own.append(a.latency_s / r)
            kept.append(g.latency_s / r)
            acted += bool(g.guard)
        print(f"{path.name}")
        print(f"  own plan      {_summary(own)}")
        print(f"  guarded       {_summary(kept)}  guard acted in {acted}")
        print(f"  CPU per placement: {cpu_own / len(cells) * 1e3:.1f} ms own, "
              f"{cpu_kept / len(cells) * 1e3:.1f} ms guarded")


if __name__ == "__main__":
    main()
