"""Deadlines met by fifo, edf, elasticflow and deadline on the real test cluster.

A hand-made mix of `sleep`-style jobs is submitted with rlsbatch while `slurm-rl daemon` runs
beside it, once per policy and scenario: "short" (16 jobs, more work than the 16 GPUs can do in
time: 4-GPU jobs fill the cluster, best-effort 4-GPU jobs queue behind them, then jobs with
deadlines arrive) and "suffice" (7 jobs of the same kinds, the GPUs suffice). Every job does its
work in steps (resnet50's profiled speed-up at batch 64: 3, 6, 8, 9 steps per 0.5 s tick at 1-4
GPUs), so a job's run time depends on the GPUs Slurm gave it, and reports its progress with
`slurm-rl progress` every 6 s, so the daemon's predictions use the measured rate. One job in each
scenario is `--rl-elastic --rl-gpus 1-4`: it writes its step to a file on SIGUSR1 and resumes
from it when it starts again, so the daemon may resize it live ([resize] on, 3 s grace). At the
end: per scenario and policy, deadlines met, mean JCT and the resizes the daemon applied (its
action log), and the elastic job's runs (its own log: GPUs per run) and RestartCnt (scontrol).

    eval "$(docker/cluster --engine docker env)"
    .venv/bin/python benchmarks/live_deadlines.py --out docs/eval/live/live-deadlines.json

Needs the test cluster (SLURM_CONF set); 15-16 minutes for both scenarios and the four
policies (measured 2026-12-01: 62-135 s per policy and scenario). Each policy's jobs, daemon
database and log stay in /tmp/live-deadlines-*/SCENARIO-POLICY. --out never replaces a file
without --force.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_rl import perfmodel
from slurm_rl.slurm.parse import parse_time

BIN = Path(sys.executable).parent
POLICIES = ("fifo", "edf", "elasticflow", "deadline")
MODEL, BATCH = "resnet50", 64
TICK_S = 0.5
"""A job sleeps this long per loop and then counts its GPU count's steps (the work per tick)."""
REPORT_S = 6
"""Seconds between two `slurm-rl progress` calls of a job."""
TIME_LIMIT_MIN = 6
RUN_TIMEOUT_S = 420.0
"""A policy's run is cut off (its jobs cancelled) after this long."""
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

CONFIG = """\
[daemon]
interval_s = 1.0

[trust]
critical_users = ["{user}"]

[resize]
enabled = true
max_per_hour = 2
grace_s = 3.0
restart_cost_s = 10.0
wait_pending_s = 15.0
"""
"""The daemon's config: resizes on, a short grace (the jobs checkpoint at once) and restart
cost (the jobs are short), and the submitting user's `critical` class believed."""


@dataclass(frozen=True, kw_only=True)
class LiveJob:
    """One job of a scenario."""

    name: str
    submit_s: float
    """Seconds after the run's start."""
    gpus: int
    """The GPUs it asks for; with `gpus_max` the low end of its --rl-gpus range."""
    work_s: float
    """Its run time at `gpus` GPUs (its steps are this many ticks' worth at that count)."""
    gpus_max: int | None = None
    elastic: bool = False
    deadline_s: float | None = None
    """Seconds after its submission."""
    klass: str = "standard"


def _mix(fill: int, sweep: int, urgent: int, crit: int, late: int) -> tuple[LiveJob, ...]:
    return (
        *(LiveJob(name=f"fill{i}", submit_s=0.0, gpus=4, work_s=40) for i in range(fill)),
        LiveJob(name="elastic", submit_s=0.5, gpus=1, gpus_max=4, elastic=True, work_s=120,
                deadline_s=200),
        *(LiveJob(name=f"sweep{i}", submit_s=1.5, gpus=4, work_s=30, klass="besteffort")
          for i in range(sweep)),
        *(LiveJob(name=f"urgent{i}", submit_s=4.0, gpus=2, work_s=20, deadline_s=60)
          for i in range(urgent)),
        *(LiveJob(name=f"crit{i}", submit_s=5.0, gpus=2, gpus_max=4, work_s=30, deadline_s=70,
                  klass="critical") for i in range(crit)),
        *(LiveJob(name=f"late{i}", submit_s=6.0, gpus=1, work_s=20, deadline_s=65)
          for i in range(late)),
    )


SCENARIOS = {"short": _mix(3, 4, 4, 2, 2), "suffice": _mix(1, 1, 2, 1, 1)}


def steps_per_tick(gpus: int) -> int:
    """Steps a job does per tick at `gpus` GPUs: resnet50's profiled throughput (batch 64)."""
    return max(1, round(perfmodel.curve_for(MODEL, BATCH).throughput(gpus) * TICK_S))


def total_steps(job: LiveJob) -> int:
    return max(1, round(job.work_s / TICK_S * steps_per_tick(job.gpus)))


JOB_SCRIPT = """#!/bin/bash
# {name}: {total} steps; checkpoints its step on SIGUSR1 and resumes from it when restarted.
d={dir}
total={total}
declare -A per_tick=({table})
g=$(echo "${{CUDA_VISIBLE_DEVICES:-}}" | tr ',' '\\n' | grep -c .)
[ "$g" -gt 0 ] || g=${{SLURM_GPUS_ON_NODE:-1}}
step=${{per_tick[$g]:-${{per_tick[1]}}}}
n=0
[ -f "$d/ck" ] && n=$(cat "$d/ck")
echo "start n=$n gpus=$g restart=${{SLURM_RESTART_COUNT:-0}} t=$(date +%s.%N)" >> "$d/log"
checkpoint() {{
  echo "$n" > "$d/ck.tmp" && mv "$d/ck.tmp" "$d/ck"
  echo "checkpoint n=$n t=$(date +%s.%N)" >> "$d/log"
}}
trap checkpoint USR1
report() {{ {progress} "$1" --total "$total" --interval 1 >/dev/null 2>>"$d/progress.err"; }}
report "$n" &
last=$SECONDS
while [ "$n" -lt "$total" ]; do
  sleep {tick}
  n=$((n + step))
  [ "$n" -gt "$total" ] && n=$total
  if [ $((SECONDS - last)) -ge {report_s} ]; then report "$n" & last=$SECONDS; fi
done
echo "done n=$n t=$(date +%s.%N)" >> "$d/log"
"""


def job_script(job: LiveJob, folder: Path) -> str:
    table = " ".join(f"[{g}]={steps_per_tick(g)}" for g in range(1, 9))
    return JOB_SCRIPT.format(name=job.name, dir=folder, total=total_steps(job), table=table,
                             progress=f"{BIN / 'slurm-rl'} progress", tick=TICK_S,
                             report_s=REPORT_S)


def rlsbatch_args(job: LiveJob, name: str, script: Path, deadline_left: int | None
                  ) -> list[str]:
    args = [str(BIN / "rlsbatch"), "--parsable", "-J", name, "-t", str(TIME_LIMIT_MIN),
            "-o", "/dev/null", "-c", "1", "--rl-steps", str(total_steps(job)),
            "--rl-model", MODEL, "--rl-batch-size", str(BATCH), "--rl-class", job.klass]
    if job.gpus_max is not None:
        args += ["--rl-gpus", f"{job.gpus}-{job.gpus_max}"]
    else:
        args += [f"--gres=gpu:{job.gpus}"]
    if job.elastic:
        args += ["--rl-elastic"]
    if deadline_left is not None:
        args += ["--rl-deadline", f"+{deadline_left}s"]
    return [*args, str(script)]


# Pure parsers of Slurm's and the job's output (tests/benchmarks/test_live_deadlines_parse.py).

def parse_squeue(text: str) -> dict[str, tuple[str, float | None, float | None]]:
    """`squeue -h -t all -o %i|%T|%S|%e` -> job id -> (state, start, end); the start only once
    the job has started, the end only once it has ended."""
    rows = {}
    for line in text.splitlines():
        jid, state, start, end = line.strip().split("|")
        rows[jid] = (state, None if state == "PENDING" else parse_time(start),
                     parse_time(end) if state in TERMINAL else None)
    return rows


def parse_restart_cnt(text: str) -> int | None:
    """The job's restart count (squeue's RestartCnt) from `scontrol show job -o ID`, which
    22.05 prints as `Restarts=N`."""
    for field in text.split():
        key, _, value = field.partition("=")
        if key in ("Restarts", "RestartCnt"):
            return int(value)
    return None


@dataclass(frozen=True, kw_only=True)
class Run:
    gpus: int
    from_step: int
    """The step it resumed from (0: the first run)."""


@dataclass(frozen=True, kw_only=True)
class JobLog:
    """What a job wrote into its own log."""

    runs: tuple[Run, ...] = ()
    checkpoints: tuple[int, ...] = ()
    """The step saved at each SIGUSR1."""
    done: bool = False
    """It counted to its last step."""


def parse_job_log(text: str) -> JobLog:
    """The job's own log: the GPUs and first step of each run, checkpoints, whether it ended."""
    runs: list[Run] = []
    checkpoints: list[int] = []
    done = False
    for line in text.splitlines():
        kv = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        if line.startswith("start "):
            runs.append(Run(gpus=int(kv["gpus"]), from_step=int(kv["n"])))
        elif line.startswith("checkpoint "):
            checkpoints.append(int(kv["n"]))
        elif line.startswith("done "):
            done = True
    return JobLog(runs=tuple(runs), checkpoints=tuple(checkpoints), done=done)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What became of one job."""

    name: str
    job_id: str
    state: str
    submit: float
    deadline: float | None
    start: float | None
    """The last run's start (Slurm's whole second)."""
    end: float | None
    restart_cnt: int | None
    log: JobLog

    @property
    def met(self) -> bool | None:
        if self.deadline is None:
            return None
        return self.end is not None and self.end <= self.deadline


@dataclass(frozen=True, kw_only=True)
class Summary:
    deadlines_met: int
    deadline_jobs: int
    completed: int
    jobs: int
    mean_jct_s: float | None
    """Over the jobs that completed: end (Slurm's) - submission (the rlsbatch call)."""
    resizes_applied: int


@dataclass(frozen=True, kw_only=True)
class PolicyRun:
    """One scenario under one policy."""

    scenario: str
    policy: str
    workdir: str
    """Jobs' folders (script, log, checkpoint), the daemon's database and log."""
    t0: float
    jobs: tuple[Outcome, ...]
    actions: tuple[dict[str, object], ...]
    """The daemon's restart actions (its action log): resizes and preemptions."""
    summary: Summary


def summarize(jobs: list[Outcome], resizes: int) -> Summary:
    """Deadlines met (end <= deadline; a job that never ended misses), mean JCT of the jobs
    that completed, resizes applied."""
    done = [j for j in jobs if j.state == "COMPLETED" and j.end is not None]
    jcts = [j.end - j.submit for j in done if j.end is not None]
    return Summary(deadlines_met=sum(1 for j in jobs if j.met),
                   deadline_jobs=sum(1 for j in jobs if j.deadline is not None),
                   completed=len(done), jobs=len(jobs),
                   mean_jct_s=sum(jcts) / len(jcts) if jcts else None,
                   resizes_applied=resizes)


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _restarts_in_db(db: Path) -> list[dict[str, object]]:
    """The daemon's restart actions (resizes, preemptions), oldest first."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT j.job_id, a.kind, a.status, a.started_at, a.argv FROM actions a JOIN "
            "action_jobs j ON j.action_id = a.id WHERE lower(a.kind) LIKE 'resize%' OR "
            "lower(a.kind) LIKE 'preempt%' OR lower(a.kind) = 'requeue_hold' ORDER BY a.id"
        ).fetchall()
    return [{"job_id": r[0], "kind": str(r[1]).lower(), "status": str(r[2]).lower(),
             "at": r[3], "argv": json.loads(r[4]) if r[4] else None} for r in rows]


def run_policy(scenario: str, policy: str, root: Path) -> PolicyRun:
    jobs = SCENARIOS[scenario]
    workdir = root / f"{scenario}-{policy}"
    workdir.mkdir()
    workdir.chmod(0o755)
    db = workdir / "d.db"
    conf = workdir / "slurm-rl.toml"
    conf.write_text(CONFIG.format(user=os.environ.get("USER") or _run(["id", "-un"]).strip()))
    _run([str(BIN / "slurm-rl"), "db", "upgrade", "--db", str(db)])
    prefix = f"live{os.getpid()}-{scenario}-{policy}-"
    log = (workdir / "daemon.log").open("w")
    daemon = subprocess.Popen([str(BIN / "slurm-rl"), "daemon", "--policy", policy, "--config",
                               str(conf), "--db", str(db), "--only-name-prefix", prefix],
                              stdout=log, stderr=subprocess.STDOUT)
    time.sleep(2.0)
    submitted: list[tuple[LiveJob, str, float, float | None]] = []
    t0 = time.time()
    ids: list[str] = []
    try:
        for job in jobs:
            delay = t0 + job.submit_s - time.time()
            if delay > 0:
                time.sleep(delay)
            folder = workdir / job.name
            folder.mkdir()
            script = folder / "job.sh"
            script.write_text(job_script(job, folder))
            deadline = None
            left = None
            if job.deadline_s is not None:
                left = max(1, round(t0 + job.submit_s + job.deadline_s - time.time()))
                deadline = time.time() + left
            at = time.time()
            out = _run(rlsbatch_args(job, prefix + job.name, script, left))
            submitted.append((job, out.strip().split(";")[0], at, deadline))
        ids = [s[1] for s in submitted]
        while time.time() - t0 < RUN_TIMEOUT_S:
            rows = parse_squeue(_run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o",
                                      "%i|%T|%S|%e"]))
            if len(rows) == len(ids) and all(r[0] in TERMINAL for r in rows.values()):
                break
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited ({daemon.returncode}): {workdir}")
            time.sleep(2.0)
        else:
            print(f"   cut off after {RUN_TIMEOUT_S:.0f} s: cancelling", flush=True)
            subprocess.run(["scancel", *ids], check=False)
            time.sleep(3.0)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
    rows = parse_squeue(_run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o",
                              "%i|%T|%S|%e"]))
    actions = _restarts_in_db(db)
    outcomes = []
    for job, jid, at, deadline in submitted:
        state, start, end = rows.get(jid, ("GONE", None, None))
        job_log = workdir / job.name / "log"
        shown = subprocess.run(["scontrol", "show", "job", "-o", jid], capture_output=True,
                               text=True).stdout
        outcomes.append(Outcome(
            name=job.name, job_id=jid, state=state, submit=at, deadline=deadline, start=start,
            end=end, restart_cnt=parse_restart_cnt(shown),
            log=parse_job_log(job_log.read_text() if job_log.exists() else "")))
    resizes = sum(1 for a in actions if a["kind"] == "resize_release" and a["status"] == "done")
    return PolicyRun(scenario=scenario, policy=policy, workdir=str(workdir), t0=t0,
                     jobs=tuple(outcomes), actions=tuple(actions),
                     summary=summarize(outcomes, resizes))


def table(results: list[PolicyRun]) -> str:
    """The Markdown table: one row per scenario and policy."""
    lines = ["| scenario | policy | deadlines met | mean JCT | completed | resizes applied "
             "| elastic job: GPUs per run (RestartCnt) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        s = r.summary
        el = next(j for j in r.jobs if j.name == "elastic")
        runs = " → ".join(str(x.gpus) for x in el.log.runs) or "-"
        ended = "completed" if el.log.done and el.state == "COMPLETED" else el.state
        jct = "-" if s.mean_jct_s is None else f"{s.mean_jct_s:.0f} s"
        lines.append(f"| {r.scenario} | {r.policy} | {s.deadlines_met}/{s.deadline_jobs} | "
                     f"{jct} | {s.completed}/{s.jobs} | {s.resizes_applied} | {runs}, {ended} "
                     f"({el.restart_cnt}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out", type=Path, help="write every job's times and the table (JSON)")
    ap.add_argument("--force", action="store_true", help="let --out replace an existing file")
    args = ap.parse_args()
    if args.out is not None and args.out.exists() and not args.force:
        ap.error(f"--out {args.out} exists (--force replaces it)")
    if args.out is not None and not args.out.parent.is_dir():
        ap.error(f"--out {args.out}: folder {args.out.parent} does not exist")
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit('set SLURM_CONF (eval "$(docker/cluster --engine docker env)")')
    # The jobs' folders must be on the nodes' shared file system: /tmp is one (docker/README.md).
    root = Path(tempfile.mkdtemp(prefix="live-deadlines-", dir="/tmp"))
    root.chmod(0o755)
    results = []
    for scenario in args.scenarios.split(","):
        for policy in args.policies.split(","):
            print(f"== {scenario}: {policy} ({len(SCENARIOS[scenario])} jobs)", flush=True)
            started = time.time()
            results.append(run_policy(scenario, policy, root))
            print(f"   {time.time() - started:.0f} s; {results[-1].summary}", flush=True)
    text = table(results)
    print(text)
    if args.out is not None:
        args.out.write_text(json.dumps({
            "command": "python benchmarks/live_deadlines.py " + " ".join(sys.argv[1:]),
            "slurm_conf": os.environ["SLURM_CONF"], "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                         time.gmtime()),
            "config": CONFIG, "table": text, "runs": [asdict(r) for r in results]},
            indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
