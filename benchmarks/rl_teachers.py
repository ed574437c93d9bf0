"""The imitation teachers of `slurm-rl train` compared by simulation on the TRAINING clusters
(docs/rl.md, "Prior and teacher"): each ranks the shown pending jobs by one job feature column
(`rl.features.TEACHERS`, lowest first; "fifo": oldest first), no preemption, through the
training environment. Prints the average JCT (s) and GPU utilisation per scenario and the
means. Reads no HELD_OUT cluster.

    .venv/bin/python benchmarks/rl_teachers.py                    # 2,000-job windows, 64 slots
    .venv/bin/python benchmarks/rl_teachers.py --max-jobs 256 --teacher est_work
    .venv/bin/python benchmarks/rl_teachers.py --validation       # docs/rl/train.toml's windows
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from slurm_rl.gittins_table import TRAINING
from slurm_rl.rl.env import Scenario, SchedulingEnv
from slurm_rl.rl.features import TEACHERS, FeatureConfig, teacher_column
from slurm_rl.rl.train import read_scenarios
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.metrics import summary

TRAIN_TOML = Path(__file__).resolve().parents[1] / "docs" / "rl" / "train.toml"


def episode(env: SchedulingEnv, teacher: str, m: int) -> tuple[float, float]:
    """(average JCT s, GPU utilisation) of one whole episode ranked by `teacher`."""
    col = None if teacher == "fifo" else teacher_column(teacher)
    obs, _ = env.reset(seed=0, options={"scenario": 0})
    total, done = 0.0, False
    while not done:
        a = np.zeros((2, m), np.float32)
        if col is not None:
            a[0] = -obs["jobs"][:, col]
        obs, reward, done, _, _ = env.step(a)
        total += reward
    assert env.sim is not None
    return -total * 3600.0, float(summary(env.sim.result())["gpu_utilization"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", action="append", choices=("fifo", *TEACHERS),
                    help="repeatable; default: fifo and every teacher")
    ap.add_argument("--max-jobs", type=int, default=64, help="job slots shown")
    ap.add_argument("--validation", action="store_true",
                    help="docs/rl/train.toml's validation windows instead of the first 2,000 "
                    "jobs of each TRAINING cluster at loads 0.8 and 1.0")
    args = ap.parse_args()
    teachers = args.teacher or ["fifo", *TEACHERS]
    engine: EngineConfig | None
    if args.validation:
        scenarios = list(read_scenarios(TRAIN_TOML)[2])
        engine = None
    else:
        scenarios = [Scenario(trace=f"data:itp-deadline-cluster{c}.csv", window="0:2000",
                              load=load) for c in TRAINING for load in (0.8, 1.0)]
        engine = EngineConfig(nodes=1, gpus_per_node=4, tick_s=60.0, restart_delay_s=30.0)
    jct: dict[str, list[float]] = {t: [] for t in teachers}
    util: dict[str, list[float]] = {t: [] for t in teachers}
    for sc in scenarios:
        env = SchedulingEnv([sc], features_cfg=FeatureConfig(max_jobs=args.max_jobs),
                            engine=engine, use_gpu_choice=False)
        for t in teachers:
            cpu = time.process_time()
            j, u = episode(env, t, args.max_jobs)
            jct[t].append(j)
            util[t].append(u)
            print(f"{sc.trace} {sc.window} load {sc.load}: {t:>14} avg JCT {j:9.0f} s  "
                  f"util {u:.3f}  ({time.process_time() - cpu:.1f} s CPU)", flush=True)
    print(f"mean over {len(scenarios)} scenarios, {args.max_jobs} slots:")
    for t in teachers:
        print(f"  {t:>14} avg JCT {np.mean(jct[t]):9.0f} s  util {np.mean(util[t]):.3f}")


if __name__ == "__main__":
    main()
