"""The imitation teachers of `slurm-rl train` compared by simulation on the TRAINING clusters
(docs/rl.md, "Prior and teacher"): each ranks the shown pending jobs by one job feature column
(`policies.rl.features.TEACHERS`, lowest first; "fifo": oldest first), no preemption, through the
training environment. Prints the average JCT (s) and GPU utilisation per scenario and the
means. Reads no HELD_OUT cluster.

    .venv/bin/python benchmarks/rl_teachers.py                    # 2,000-job windows, 64 slots
    .venv/bin/python benchmarks/rl_teachers.py --max-jobs 256 --teacher est_work
    .venv/bin/python benchmarks/rl_teachers.py --validation       # docs/rl/train.toml's windows
    .venv/bin/python benchmarks/rl_teachers.py --teacher est_work --preempt-margin 0
    .venv/bin/python benchmarks/rl_teachers.py --scenarios docs/rl/train-families.toml --every 6

`--scenarios FILE`: the [[scenario]] tables of a scenarios file of `slurm-rl train` instead
(generated workload families, time-limit models, node sizes; rl/scenarios.py), every K-th
with `--every K`; with `--validation`, that file's [[validation]] tables. The means are also
given per family and per time-limit model.

`--preempt-margin M` adds the preemptive `est_work` teacher (docs/rl.md, "Preemption"): pending
jobs by stated remaining GPU-seconds, and a pending job that does not fit requeues running jobs
whose stated remaining GPU-seconds exceed (1 + M) times its own (`policies.rl.preempt_by_work`),
run through `run.simulate` (the env's agent can not preempt).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slurm_rl.core import ClusterSnapshot, Decision, JobOrder, JobView
from slurm_rl.policies.ordering import managed_pending
from slurm_rl.policies.preemption import may_preempt
from slurm_rl.policies.rl import preempt_by_work, remaining_work
from slurm_rl.policies.rl.features import TEACHERS, FeatureConfig, teacher_column
from slurm_rl.rl.env import Scenario, SchedulingEnv
from slurm_rl.rl.scenarios import read_scenarios
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.metrics import summary
from slurm_rl.sim.run import Sizing, load_jobs, resolve_trace_path, simulate
from slurm_rl.splits import TRAINING_TRACES

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


@dataclass
class PreemptiveEstWork:
    """The live-observable analogue of `srtf2d-oracle` (Preempting; reads no true duration)."""

    margin: float
    name: str = "est_work+preempt"

    def may_preempt(self, job: JobView) -> bool:
        return may_preempt(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        work = {j.id: remaining_work(j, snapshot.time) for j in jobs}
        ranked = sorted(jobs, key=lambda j: (work[j.id] is None, work[j.id] or 0.0,
                                             j.submit_time))
        order = tuple(JobOrder(job_id=j.id, rank=i, reason="est_work") for i, j in
                      enumerate(ranked))
        return Decision(policy=self.name, order=order,
                        preemptions=preempt_by_work(snapshot, ranked, self.margin, self.name))


def preemptive_run(sc: Scenario, margin: float, engine: EngineConfig) -> tuple[float, float]:
    """(average JCT s, GPU utilisation) of the preemptive est_work teacher on `sc`."""
    jobs = load_jobs(resolve_trace_path(sc.trace), "itp-deadline", sc.window)
    result = simulate(jobs, PreemptiveEstWork(margin), Sizing(gpus_per_node=4, load=sc.load),
                      engine=engine)
    s = summary(result)
    return float(s["avg_jct_s"]), float(s["gpu_utilization"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", action="append", choices=("fifo", *TEACHERS),
                    help="repeatable; default: fifo and every teacher")
    ap.add_argument("--max-jobs", type=int, default=64, help="job slots shown")
    ap.add_argument("--validation", action="store_true",
                    help="docs/rl/train.toml's validation windows instead of the first 2,000 "
                    "jobs of each TRAINING cluster at loads 0.8 and 1.0")
    ap.add_argument("--scenarios", type=Path, default=None,
                    help="a scenarios file of slurm-rl train: its [[scenario]] tables (its "
                    "[[validation]] ones with --validation)")
    ap.add_argument("--every", type=int, default=1, help="with --scenarios: every K-th one")
    ap.add_argument("--preempt-margin", type=float, default=None,
                    help="also run the preemptive est_work teacher with this margin (>= 0; "
                    "not with --validation)")
    args = ap.parse_args()
    if args.preempt_margin is not None and (args.validation or args.preempt_margin < 0):
        ap.error("--preempt-margin: a number >= 0, without --validation")
    teachers = args.teacher or ["fifo", *TEACHERS]
    engine: EngineConfig | None
    if args.every < 1:
        ap.error("--every: a whole number of at least 1")
    if args.scenarios is not None:
        if args.preempt_margin is not None:
            ap.error("--preempt-margin: not with --scenarios")
        try:
            _, train, val = read_scenarios(args.scenarios)
        except (OSError, ValueError) as exc:
            ap.error(f"--scenarios {args.scenarios}: {exc}")
        scenarios = list(val if args.validation else train)[::args.every]
        engine = None
    elif args.validation:
        scenarios = list(read_scenarios(TRAIN_TOML)[2])
        engine = None
    else:
        scenarios = [Scenario(trace=trace, window="0:2000", load=load)
                     for trace in TRAINING_TRACES for load in (0.8, 1.0)]
        engine = EngineConfig(nodes=1, gpus_per_node=4, tick_s=60.0, restart_delay_s=30.0,
                              restart_grace_s=0.0, requeue_s=0.0,  # one-step restarts,
                              restart_rules=False)  # free: as docs/rl.md's figures were run
    pre = "est_work+preempt"
    jct: dict[str, list[float]] = {t: [] for t in [*teachers, pre]}
    util: dict[str, list[float]] = {t: [] for t in [*teachers, pre]}
    groups: dict[str, list[int]] = {}
    for sc in scenarios:
        env = SchedulingEnv([sc], features_cfg=FeatureConfig(max_jobs=args.max_jobs),
                            engine=engine, use_gpu_choice=False)
        try:
            env.reset(seed=0, options={"scenario": 0})
        except ValueError:  # (no decision to make: every job starts on arrival)
            print(f"{_name(sc)}: no decision to make, skipped", flush=True)
            continue
        if sc.family:
            limit = "factor" if sc.time_limit is None else sc.time_limit.model.value
            for key in (f"family {sc.family}", f"limits {limit}",
                        f"{sc.gpus_per_node} GPUs/node"):
                groups.setdefault(key, []).append(len(jct[teachers[0]]))
        for t in teachers:
            cpu = time.process_time()
            j, u = episode(env, t, args.max_jobs)
            jct[t].append(j)
            util[t].append(u)
            print(f"{_name(sc)}: {t:>14} avg JCT {j:9.0f} s  "
                  f"util {u:.3f}  ({time.process_time() - cpu:.1f} s CPU)", flush=True)
        if args.preempt_margin is not None and engine is not None:
            cpu = time.process_time()
            j, u = preemptive_run(sc, args.preempt_margin, engine)
            jct[pre].append(j)
            util[pre].append(u)
            print(f"{sc.trace} {sc.window} load {sc.load}: {pre:>14} avg JCT {j:9.0f} s  "
                  f"util {u:.3f}  ({time.process_time() - cpu:.1f} s CPU)", flush=True)
    print(f"mean over {len(jct[teachers[0]])} scenarios, {args.max_jobs} slots:")
    for t in [*teachers, pre] if args.preempt_margin is not None else teachers:
        print(f"  {t:>14} avg JCT {np.mean(jct[t]):9.0f} s  util {np.mean(util[t]):.3f}")
    if groups:
        # Per group, each teacher's mean JCT over that of the group's best teacher, per
        # scenario (so that no long-JCT scenario outweighs the rest).
        print("mean ratio to the best teacher of each scenario, per group:")
        best = [min(jct[t][i] for t in teachers) for i in range(len(jct[teachers[0]]))]
        print(f"  {'group':>16} " + " ".join(f"{t:>13}" for t in teachers))
        for key, idx in {"all": list(range(len(best))), **groups}.items():
            print(f"  {key:>16} " + " ".join(
                f"{np.mean([jct[t][i] / best[i] for i in idx]):13.3f}" for t in teachers))


def _name(sc: Scenario) -> str:
    if not sc.family:
        return f"{sc.trace} {sc.window} load {sc.load}"
    limit = "factor" if sc.time_limit is None else sc.time_limit.model.value
    return (f"{sc.family} {Path(sc.trace).stem} {sc.window} load {sc.load} {limit} "
            f"{sc.gpus_per_node} GPUs/node")


if __name__ == "__main__":
    main()
