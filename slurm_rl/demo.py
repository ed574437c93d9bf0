"""`make demo`: a small mixed workload on the test cluster, under `fifo`, `deadline` and `rl`.

The workload (short `sleep` jobs, all submitted with rlsbatch, about 70 s per policy):
  4 "train" jobs, 4 GPUs each, 28 s, no deadline — they fill the 16 GPUs;
  6 "sweep" jobs, 4 GPUs each, 20 s, no deadline — they queue behind;
  4 "urgent" jobs, 2 GPUs each, 14 s, submitted last with a deadline 52 s out.
Under FIFO the urgent jobs wait for the sweep and miss; the deadline policy should move them to
the front. `rl` is the learned policy with its shipped checkpoint (docs/rl.md): it orders for
average completion time and reads no deadline weight, so whatever it does with the urgent jobs
comes from what it learned about small and waiting jobs. The same workload runs once per policy
with the daemon running beside it; the end is a side-by-side table read from Slurm's own start
and end times. `python -m slurm_rl.demo POLICY...` runs only the policies named.

Each policy's daemon database and log go to a temporary folder that is deleted at the end;
`DEMO_KEEP=1 make demo` keeps them (to try `slurm-rl explain` / `status --db` on them). The demo
ends by printing the two lines that put `rlsbatch`, `slurm-rl` and the test cluster's SLURM_CONF
into your shell (README.md, Quick look).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from slurm_rl.slurm.parse import parse_time

console = Console()
PREFIX = "demo-"
POLICIES = ("fifo", "deadline", "rl")


@dataclass(frozen=True, kw_only=True)
class DemoJob:
    name: str
    gpus: int
    seconds: int
    deadline_in_s: int | None = None


WORKLOAD = (
    *(DemoJob(name=f"train{i}", gpus=4, seconds=28) for i in range(4)),
    *(DemoJob(name=f"sweep{i}", gpus=4, seconds=20) for i in range(6)),
    *(DemoJob(name=f"urgent{i}", gpus=2, seconds=14, deadline_in_s=52) for i in range(4)),
)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    job: DemoJob
    job_id: str
    submit: float
    deadline: float | None
    start: float | None
    end: float | None

    @property
    def met(self) -> bool | None:
        if self.deadline is None:
            return None
        return self.end is not None and self.end <= self.deadline


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo: {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _cancel_leftovers() -> None:
    out = _run(["squeue", "-h", "-o", "%i %j"])
    ids = [line.split()[0] for line in out.splitlines() if line.split()[1:2]
           and line.split()[1].startswith(PREFIX)]
    if ids:
        _run(["scancel", *ids])
        time.sleep(2)


def _submit(job: DemoJob, tag: str) -> tuple[str, float, float | None]:
    args = [_bin("rlsbatch"), "--parsable", "-J", f"{PREFIX}{tag}-{job.name}",
            f"--gres=gpu:{job.gpus}", "-t", "2", "-o", "/dev/null"]
    deadline = None
    if job.deadline_in_s is not None:
        deadline = time.time() + job.deadline_in_s
        args += ["--rl-deadline", f"+{job.deadline_in_s}s", "--rl-class", "critical"]
    args += ["--wrap", f"sleep {job.seconds}"]
    submitted = time.time()
    job_id = _run(args).strip().split(";")[0]
    return job_id, submitted, deadline


def _states(ids: list[str]) -> dict[str, tuple[str, float | None, float | None]]:
    out = _run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%S|%e"])
    rows = {}
    for line in out.splitlines():
        jid, state, start, end = line.split("|")
        rows[jid] = (state, parse_time(start) if state != "PENDING" else None,
                     parse_time(end) if state in ("COMPLETED", "CANCELLED", "FAILED",
                                                   "TIMEOUT") else None)
    return rows


def _queue_line(rows: dict[str, tuple[str, float | None, float | None]],
                names: dict[str, str], t0: float) -> str:
    by_state: dict[str, list[str]] = {"RUNNING": [], "PENDING": []}
    for jid, (state, _s, _e) in sorted(rows.items(), key=lambda kv: int(kv[0])):
        if state in by_state:
            by_state[state].append(names[jid])
    return (f"t={time.time() - t0:4.0f}s  [green]running[/]: {' '.join(by_state['RUNNING']) or '-'}"
            f"  [yellow]pending[/]: {' '.join(by_state['PENDING']) or '-'}")


def run_policy(policy: str) -> list[Outcome]:
    workdir = Path(tempfile.mkdtemp(prefix=f"slurm-rl-demo-{policy}-"))
    db = workdir / "demo.db"
    _run([_bin("slurm-rl"), "db", "upgrade", "--db", str(db)])
    log = (workdir / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [_bin("slurm-rl"), "daemon", "--policy", policy, "--interval", "1", "--db", str(db),
         "--only-name-prefix", f"{PREFIX}{policy}-"],
        stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
    )
    console.rule(f"[bold]policy: {policy}")
    kept = "kept: DEMO_KEEP is set" if _keep() else "deleted at the end unless DEMO_KEEP=1"
    console.print(f"daemon pid {daemon.pid}, database {db}, log {workdir / 'daemon.log'} "
                  f"({kept})")
    outcomes: list[tuple[DemoJob, str, float, float | None]] = []
    try:
        for job in WORKLOAD:
            job_id, submitted, deadline = _submit(job, policy)
            outcomes.append((job, job_id, submitted, deadline))
            time.sleep(0.2)
        ids = [o[1] for o in outcomes]
        names = {o[1]: o[0].name for o in outcomes}
        console.print(f"submitted {len(ids)} jobs with rlsbatch: "
                      + ", ".join(f"{names[i]}={i}" for i in ids))
        t0 = outcomes[0][2]
        last_print = 0.0
        while True:
            rows = _states(ids)
            if all(rows.get(i, ("",))[0] not in ("PENDING", "RUNNING", "COMPLETING", "")
                   for i in ids):
                break
            if time.time() - last_print >= 10:
                console.print(_queue_line(rows, names, t0))
                last_print = time.time()
            if daemon.poll() is not None:
                raise SystemExit(f"demo: the daemon exited ({daemon.returncode}); "
                                 f"see {workdir / 'daemon.log'}")
            time.sleep(2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
    rows = _states([o[1] for o in outcomes])
    result = [
        Outcome(job=job, job_id=jid, submit=sub, deadline=dl,
                start=rows[jid][1], end=rows[jid][2])
        for job, jid, sub, dl in outcomes
    ]
    if not _keep():
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _keep() -> bool:
    return os.environ.get("DEMO_KEEP", "") not in ("", "0")


def next_steps(engine: str) -> tuple[str, str]:
    """What `make demo` ends with on `engine` (docker or native: the one `make demo` ran on,
    docker/engine-up): paste these, then README.md's Quick look works as written."""
    return ("source .venv/bin/activate", f'eval "$(docker/cluster --engine {engine} env)"')


NEXT_STEPS = next_steps("docker")
"""The lines on the default engine: README.md's Quick look starts with them."""


def print_next_steps() -> None:
    engine = os.environ.get("SLURM_RL_ENGINE") or "native"
    print("\nNext: paste these two lines into your shell, then try README.md's Quick look:")
    for line in next_steps(engine):
        print(f"    {line}")
    sys.stdout.flush()


def _fmt(t: float | None, t0: float) -> str:
    return "-" if t is None else f"{t - t0:5.0f}s"


def print_summary(results: dict[str, list[Outcome]]) -> None:
    table = Table(title="deadlines and finish times (seconds after each run's first submission)")
    table.add_column("job")
    table.add_column("GPUs", justify="right")
    table.add_column("deadline", justify="right")
    for policy in results:  # one column per policy: finish time, and for deadlines met/missed
        table.add_column(policy, justify="right")
    by_policy = {p: {o.job.name: o for o in outs} for p, outs in results.items()}
    first = next(iter(results.values()))
    t0s = {p: min(o.submit for o in outs) for p, outs in results.items()}
    for o in first:
        row = [o.job.name, str(o.job.gpus),
               "-" if o.deadline is None else _fmt(o.deadline, t0s[next(iter(results))])]
        for p in results:
            x = by_policy[p][o.job.name]
            met = x.met
            mark = "" if met is None else (" [green]met" if met else " [red]missed")
            row.append(_fmt(x.end, t0s[p]) + mark)
        table.add_row(*row)
    console.print(table)
    for p, outs in results.items():
        with_dl = [o for o in outs if o.deadline is not None]
        n_met = sum(1 for o in with_dl if o.met)
        jcts = [o.end - o.submit for o in outs if o.end is not None]
        span = max((o.end or 0) for o in outs) - t0s[p]
        console.print(f"[bold]{p}[/]: deadlines met {n_met}/{len(with_dl)}, "
                      f"mean JCT {sum(jcts) / max(1, len(jcts)):.0f}s, makespan {span:.0f}s")


def main() -> None:
    if shutil.which("squeue") is None or not os.environ.get("SLURM_CONF"):
        raise SystemExit("demo: start the test cluster first (make demo does): "
                         "docker/cluster up && eval \"$(docker/cluster env)\"")
    from slurm_rl.slurm.conf import slurm_conf_problem

    problem = slurm_conf_problem()
    if problem is not None:
        raise SystemExit(f"demo: {problem}")
    chosen = tuple(sys.argv[1:]) or POLICIES
    from slurm_rl import policies

    unknown = [p for p in chosen if p not in policies.names()]
    if unknown:
        raise SystemExit(f"demo: unknown policies {', '.join(unknown)} "
                         f"(valid: {', '.join(policies.names())})")
    _cancel_leftovers()
    results = {policy: run_policy(policy) for policy in chosen}
    console.rule("[bold]summary")
    print_summary(results)
    print_next_steps()


if __name__ == "__main__":
    main()
