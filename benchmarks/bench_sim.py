"""Simulator throughput on a 100,000-job trace. Prints jobs/s; not a timed test.

The trace: the nine ITP deadline traces shipped in slurm_rl/data/traces, each shifted to start
at t=0 and overlaid on one clock (57k jobs over ~60 days), then repeated back to back until
100,000 jobs (`trace.overlay`). Overlaying keeps the load steady; concatenating the files one
after another would swing from 5 to 500 GPUs of demand and leave queues of thousands of jobs in
the busy stretches. The cluster is sized by --load (default 0.8) on 4-GPU nodes.

    .venv/bin/python benchmarks/bench_sim.py                 # every non-oracle policy
    .venv/bin/python benchmarks/bench_sim.py --oracles       # ... and the oracles
    .venv/bin/python benchmarks/bench_sim.py --policy edf --jobs 20000
    .venv/bin/python benchmarks/bench_sim.py --policy fifo --policy rl \
        --policy-option rl:preempt_margin=0          # a policy's options (NAME:KEY=VALUE)

Every policy runs on the rigid trace as shipped (no elastic jobs: the ITP traces have no GPU
ranges), elasticflow too: there it is EDF with admission control. The digest (sha256 of every
job's start, end, GPUs and restarts) shows that a change kept the results the same.

Restarts are free (`restart_rules` off: any running job may be preempted whenever the policy
asks), so that a preemptive policy's whole decision path is measured: none of these traces'
jobs opted in to restarts, and under the daemon's rules (the engine's default) no job would be
restarted at all. `--restart-rules` runs the default instead.

Times are CPU seconds of this process (time.process_time), so that other work on the machine
does not inflate them; wall seconds are printed beside.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from importlib import resources

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.sim import trace
from slurm_rl.sim.cli import option_value
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.metrics import summary


class NullPolicy:
    """Decides nothing (Slurm's own order); run with skip_futile off: asked at every event."""

    name = "null"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name)


def build_trace(jobs: int) -> tuple[trace.TraceJob, ...]:
    folder = resources.files("slurm_rl") / "data" / "traces"
    files = sorted(p.name for p in folder.iterdir() if p.name.startswith("itp-deadline-"))
    loaded = [trace.load(str(folder / name), "itp-deadline").jobs for name in files]
    per_copy = sum(len(t) for t in loaded)
    return trace.overlay(loaded, repeat=-(-jobs // per_copy), limit=jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", action="append", help="policy name (repeatable); "
                    "default: every registered policy that is not an oracle")
    ap.add_argument("--oracles", action="store_true", help="with the default, the oracles too")
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--tick", type=float, default=60.0, help="policy tick, seconds")
    ap.add_argument("--restart-rules", action="store_true",
                    help="the daemon's restart rules (the engine's default) instead of free "
                    "restarts")
    ap.add_argument("--policy-option", action="append", default=[], metavar="NAME:KEY=VALUE",
                    help="an option for one policy (repeatable), e.g. rl:preempt_margin=0; "
                    "VALUE is read as JSON if it parses, as `slurm-rl simulate` reads it")
    ap.add_argument("--null", action="store_true",
                    help="also run a policy that decides nothing, asked at every event: the "
                    "engine's own cost")
    args = ap.parse_args()

    options: dict[str, dict[str, object]] = {}
    for item in args.policy_option:
        name, sep, kv = item.partition(":")
        key, eq, value = kv.partition("=")
        if not (sep and eq and name and key):
            ap.error(f"--policy-option {item!r}: expected NAME:KEY=VALUE")
        options.setdefault(name, {})[key] = option_value(value)
    t0 = time.perf_counter()
    jobs = build_trace(args.jobs)
    nodes = trace.nodes_for_load(jobs, args.load, args.gpus_per_node)
    print(f"trace: {len(jobs)} jobs, built in {time.perf_counter() - t0:.1f} s; cluster "
          f"{nodes} nodes x {args.gpus_per_node} GPUs (load {args.load})")
    default = [n for n in policies.names() if args.oracles or n not in policies.oracles()]
    names = (["null"] if args.null else []) + (args.policy or default)
    print(f"{'policy':>14} {'CPU s':>7} {'wall s':>7} {'jobs/s':>8} {'decisions':>10} "
          f"{'preempts':>9} {'resizes':>8} {'avg JCT s':>10} {'util':>5}  digest")
    for name in names:
        if name != "null" and name not in policies.names():
            print(f"{name}: not available (registered: {', '.join(policies.names())})")
            continue
        policy = NullPolicy() if name == "null" else policies.make(name, **options.get(name, {}))
        cfg = EngineConfig(nodes=nodes, gpus_per_node=args.gpus_per_node, tick_s=args.tick,
                           skip_futile=name != "null", restart_rules=args.restart_rules)
        sim = Simulator(jobs, policy, cfg)
        cpu, wall = time.process_time(), time.perf_counter()
        result = sim.run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        s = summary(result)
        digest = hashlib.sha256(repr([(j.job_id, j.start, j.end, j.gpus, j.restarts)
                                      for j in result.jobs]).encode()).hexdigest()[:12]
        print(f"{name:>14} {cpu:7.1f} {wall:7.1f} {len(result.jobs) / cpu:8,.0f} "
              f"{result.decisions:10d} {result.preemptions:9d} {result.resizes:8d} "
              f"{s['avg_jct_s']:10.0f} {s['gpu_utilization']:5.2f}  {digest}", flush=True)


if __name__ == "__main__":
    main()
