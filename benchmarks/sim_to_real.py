"""Sim-to-real check: the same small trace on the real test cluster and in the simulator.

A window of an ITP trace is time-compressed into `sleep` jobs (a few minutes in all, heavy
contention on 4 nodes x 4 GPUs), submitted with rlsbatch at their compressed submit times while
`slurm-rl daemon` runs with a policy. slurmctld runs at debug level for the replay (scontrol
setdebug, restored afterwards), so its log says, to the millisecond, when each job was accepted,
started and completed and when its main and backfill schedulers ran. The simulator then runs
the same jobs with what a model of this cluster may know: submit instants, each job's run time
as Slurm saw it, the 5-minute time limits, conservative backfill with whole-node reservations,
cons_tres placement, the scheduler cycle instants and the daemon's cycle phase and delay; not
which job any scheduler started. Reported per policy: Kendall tau-b of start times (at Slurm's
whole-second resolution) and the per-job JCT error. Needs the test cluster (docker/cluster up,
SLURM_CONF set); --resim runs the simulator again on a saved replay, with parts of the model
switched off. Reading the logs, saved replays and the comparison: sim_to_real_logs.py.

    .venv/bin/python benchmarks/sim_to_real.py --policies fifo,deadline --raw replay-new.json
    .venv/bin/python benchmarks/sim_to_real.py --resim docs/sim-to-real/replay-4.json \
        --no-slurm-timing

Prints the table docs/sim-to-real.md shows; --raw and --out never replace a file (--force).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from slurm_rl import perfmodel
from slurm_rl.sim.cluster import CONS_TRES, PLACEMENTS
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.trace import TraceJob
from slurm_rl.slurm.parse import parse_time
from slurm_rl.submit.intent import decode_comment

# benchmarks/ is no package: run as a script, only this folder is on sys.path; the repository
# root makes `benchmarks.sim_to_real_logs` the same module to Python and to mypy
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.sim_to_real_logs import (  # noqa: E402
    Cycle,
    DaemonTiming,
    RealJob,
    ReplayJob,
    SimOut,
    SlurmTiming,
    compare,
    daemon_timing,
    job_events,
    kendall_tau_b,
    load_raw,
    slurm_timing,
)

BIN = Path(sys.executable).parent
NODES, GPUS_PER_NODE, CPUS_PER_NODE = 4, 4, 8
RELEASE_S = 0.015
"""Time from slurmctld's "_job_complete ... done" line to the job's resources being free: the
REQUEST_TERMINATE_JOB round trip to slurmd (15 ms at debug2 level on the test cluster). A main
scheduler run 4 ms after a completion did not see that job's node free."""
WILL_RUN_WINDOW_S = 30.0
"""select/cons_tres's will-run test in Slurm 22.05 (`time_window = 30` in _will_run_test):
with 5-minute limits all running jobs ending within half a minute count as one batch, so
slurmctld planned a 4-GPU job on the node its choice rules pick among those freed by the
batch, at the batch's last end, not on the node that frees up first (replayed in
docs/sim-to-real.md)."""
TIME_LIMIT_MIN = 5
MODEL, BATCH = "resnet50", 64
"""An elastic replay's jobs claim this model and batch size (`--rl-model`, `--rl-batch-size`):
the daemon and the simulator predict a job's rate at another GPU count along its curve."""
JOB = Path(__file__).resolve().parent / "sim_to_real_job.py"


def compressed_workload(trace: str, start: int, count: int, median_s: float, min_s: int,
                        max_s: int, load: float, elastic_every: int = 0) -> list[ReplayJob]:
    """`count` jobs from `start` of an ITP deadline trace, compressed to a short replay.

    Durations are scaled so their median is `median_s` (clamped to min_s..max_s); deadlines keep
    their slack relative to duration; submit times are spread so that the offered load on the
    16 GPUs is `load` (>1: a queue builds up). With `elastic_every` k > 0 every job works in
    steps at the profiled rate of its GPU count (`seconds` at `gpus`), and every k-th is elastic
    (`--rl-elastic --rl-gpus G-4`: 1-GPU jobs from 1, 4-GPU jobs from 2).
    """
    path = resources.files("slurm_rl") / "data" / "traces" / trace
    with path.open() as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: int(r["submission_time"]))
    if not 0 <= start < len(rows) or count < 1:
        raise SystemExit(f"--start {start} --count {count}: {trace} has {len(rows)} jobs")
    rows = rows[start:start + count]
    durations = sorted(int(r["duration"]) for r in rows)
    scale = median_s / durations[len(durations) // 2]
    jobs = []
    for r in rows:
        seconds = int(min(max_s, max(min_s, round(int(r["duration"]) * scale))))
        gpus = min(int(r["num_gpu"]), NODES * GPUS_PER_NODE)
        if gpus > GPUS_PER_NODE:
            gpus = math.ceil(gpus / GPUS_PER_NODE) * GPUS_PER_NODE
        slack = (int(r["deadline"]) - int(r["submission_time"])) / max(1, int(r["duration"]))
        jobs.append(ReplayJob(name=r["job_id"][:8], submit_offset=float(r["submission_time"]),
                              seconds=seconds, gpus=gpus, deadline_offset=slack * seconds))
    work = sum(j.seconds * j.gpus for j in jobs)
    span = work / (load * NODES * GPUS_PER_NODE)
    t0, t1 = jobs[0].submit_offset, jobs[-1].submit_offset
    out = []
    for i, j in enumerate(jobs):
        elastic = elastic_every > 0 and i % elastic_every == 0 and j.gpus <= GPUS_PER_NODE
        low = max(1, j.gpus // 2) if elastic else j.gpus
        out.append(ReplayJob(
            name=j.name, submit_offset=(j.submit_offset - t0) / max(1.0, t1 - t0) * span,
            seconds=j.seconds, gpus=low,
            deadline_offset=None if j.deadline_offset is None
            else max(j.seconds + 5.0, j.deadline_offset),
            steps=None, gpus_max=GPUS_PER_NODE if elastic else None, elastic=elastic))
        if elastic_every > 0:  # the same work in steps; `seconds` become its run at `low`
            steps = round(j.seconds * step_rate(j.gpus))
            out[-1] = dataclasses.replace(out[-1], steps=steps,
                                          seconds=round(steps / step_rate(low)))
    return out


def step_rate(gpus: int) -> float:
    """Steps per second of an elastic replay's job at `gpus` GPUs: the profiled throughput of
    MODEL at BATCH, the curve the simulator scales a job's rate along."""
    return perfmodel.curve_for(MODEL, BATCH).throughput(gpus)


DAEMON_CONFIG = """\
[daemon]
interval_s = 1.0

[resize]
enabled = true
preempt = true
max_per_hour = {max_per_hour}
grace_s = {grace_s}
restart_cost_s = {restart_cost_s}
wait_pending_s = 15.0
"""
"""The daemon's config in an elastic replay: restarts on, with a short grace (the jobs
checkpoint at once) and the restart cost the simulator is told."""


@dataclass(frozen=True, kw_only=True)
class Restarts:
    """How an elastic replay's restarts go: the daemon's [resize] settings, and what the
    simulator is told a restart costs (its per-step model: grace, requeue, restore)."""

    grace_s: float = 3.0
    max_per_hour: int = 2
    sim_grace_s: float = 3.5
    """Signal to requeue: grace_s plus the wait for the next daemon cycle (half of 1 s). The
    replay's own measure replaces it where the daemon's action log gives one
    (`DaemonTiming.graces`), unless --sim-grace is given."""
    requeue_s: float = 1.2
    """Requeue to running again (the release's StartTime=now+1 and the next scheduling pass;
    docs/sim-to-real.md, "What a restart costs")."""
    restore_s: float = 0.1
    """Running again to making progress (the job's start-up; it reads a one-line checkpoint)."""

    @property
    def cost_s(self) -> float:
        return self.sim_grace_s + self.requeue_s + self.restore_s


def _gres_args(gpus: int) -> list[str]:
    if gpus <= GPUS_PER_NODE:
        return [f"--gres=gpu:{gpus}"]
    return [f"--gres=gpu:{GPUS_PER_NODE}", f"--nodes={gpus // GPUS_PER_NODE}"]


@contextmanager
def slurmctld_debug(conf: dict[str, str]) -> Iterator[None]:
    """Turn on the debug lines that say when slurmctld's schedulers run, for the replay, and
    back to the level and flags of `conf` (slurmctld's running config) afterwards (scontrol
    setdebug, no restart)."""
    subprocess.run(["scontrol", "setdebug", "debug"], check=True)
    subprocess.run(["scontrol", "setdebugflags", "+Backfill"], check=True)
    try:
        yield
    finally:
        if "Backfill" not in conf.get("DebugFlags", "").split(","):
            subprocess.run(["scontrol", "setdebugflags", "-Backfill"], check=False)
        subprocess.run(["scontrol", "setdebug", conf.get("SlurmctldDebug", "info")],
                       check=False)


def _slurm_config() -> dict[str, str]:
    """slurmctld's running configuration (scontrol show config) as key -> value."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
    pairs = (line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def run_real(jobs: list[ReplayJob], policy: str, prefix: str, restarts: Restarts | None = None
             ) -> tuple[list[RealJob], DaemonTiming | None, SlurmTiming | None]:
    """The replay on the cluster. With `restarts` (an elastic replay) the jobs work in steps
    (sim_to_real_job.py) and the daemon may resize and preempt its elastic ones."""
    workdir = Path(tempfile.mkdtemp(prefix="sim2real-"))
    workdir.chmod(0o755)
    db = workdir / "d.db"
    subprocess.run([BIN / "slurm-rl", "db", "upgrade", "--db", db], check=True,
                   capture_output=True)
    log = (workdir / "daemon.log").open("w")
    extra: list[str | Path] = []
    if restarts is not None:
        conf_file = workdir / "slurm-rl.toml"
        conf_file.write_text(DAEMON_CONFIG.format(
            max_per_hour=restarts.max_per_hour, grace_s=restarts.grace_s,
            restart_cost_s=round(restarts.cost_s, 3)))
        extra = ["--config", conf_file]
    daemon = subprocess.Popen([BIN / "slurm-rl", "daemon", "--policy", policy, "--interval", "1",
                               "--db", db, "--only-name-prefix", prefix, *extra],
                              stdout=log, stderr=subprocess.STDOUT)
    submitted: list[tuple[ReplayJob, str, float | None, float]] = []
    all_done = False
    t0 = time.time() + 2.0
    conf = _slurm_config()
    log_path = Path(conf["SlurmctldLogFile"]) if conf.get("SlurmctldLogFile") else None
    log_from = log_path.stat().st_size if log_path and log_path.is_file() else 0
    with slurmctld_debug(conf):
        try:
            for j in jobs:
                delay = t0 + j.submit_offset - time.time()
                if delay > 0:
                    time.sleep(delay)
                args = [str(BIN / "rlsbatch"), "--parsable", "-J", f"{prefix}{j.name}",
                        "-t", str(TIME_LIMIT_MIN), "-o", "/dev/null"]
                if j.elastic:
                    args += ["--rl-gpus", f"{j.gpus}-{j.gpus_max}", "--rl-elastic"]
                else:
                    args += _gres_args(j.gpus)
                deadline = None
                if j.deadline_offset is not None and policy != "fifo":
                    left = max(1, round(t0 + j.submit_offset + j.deadline_offset - time.time()))
                    deadline = time.time() + left
                    args += ["--rl-deadline", f"+{left}s"]
                # The job stamps its own start and end (sub-second; Slurm's are whole seconds).
                stamp = workdir / f"{len(submitted)}.t"
                if j.steps is not None:
                    folder = workdir / str(len(submitted))
                    folder.mkdir()
                    folder.chmod(0o777)
                    rates = ",".join(f"{step_rate(g):.6f}" for g in range(1, GPUS_PER_NODE + 1))
                    args += ["-c", "1", "--rl-steps", str(j.steps), "--rl-model", MODEL,
                             "--rl-batch-size", str(BATCH), "--wrap",
                             # SIGUSR1 ends a process that has no handler yet: a resize can
                             # be signalled in the job's first second (docs/rlsbatch.md)
                             f"trap '' USR1; exec {sys.executable} {JOB} --dir {folder} "
                             f"--steps {j.steps} --rates {rates}"]
                else:
                    args += ["--wrap", f"date +%s.%N > {stamp}; sleep {j.seconds}; "
                             f"date +%s.%N >> {stamp}"]
                before = time.time()
                out = subprocess.run(args, capture_output=True, text=True, check=True)
                # Without slurmctld's log, the submit instant is the rlsbatch call's midpoint
                # (slurmctld stamps the job while rlsbatch runs), not squeue's whole second.
                submitted.append((j, out.stdout.strip().split(";")[0], deadline,
                                  (before + time.time()) / 2))
            ids = [s[1] for s in submitted]
            while True:
                rows = _squeue(ids)
                if len(rows) == len(ids) and all(r[0] == "COMPLETED" for r in rows.values()):
                    break
                bad = [i for i, r in rows.items() if r[0] in ("FAILED", "CANCELLED", "TIMEOUT")]
                if bad:
                    raise SystemExit(f"jobs {bad} did not complete; see {workdir}")
                time.sleep(2)
            all_done = True
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
            log.close()
            if not all_done and submitted:
                # the next replay must find the cluster idle, as this one did
                subprocess.run(["scancel", *(s[1] for s in submitted)], capture_output=True)
    rows = _squeue(ids)
    lines: list[str] = []
    if log_path and log_path.is_file():
        with log_path.open("rb") as fh:
            fh.seek(log_from)
            lines = fh.read().decode(errors="replace").splitlines()
    logged = job_events(lines, {jid for _, jid, _, _ in submitted})
    done_restarts = _restarts_done(db) if restarts is not None else {}
    real = []
    for i, (j, jid, deadline, at) in enumerate(submitted):
        runs: tuple[tuple[float, int], ...] = ()
        waits: tuple[float, ...] = ()
        if j.steps is not None:
            text = (workdir / str(i) / "log").read_text()
            runs, finished = job_runs(text)
            waits = signal_waits(text, restarts.grace_s if restarts else 0.0)
            if not runs or finished is None:
                raise SystemExit(f"job {jid}: its log has no start or no end; see {workdir}")
            start, end = runs[0][0], finished
        else:
            start, end = (float(x) for x in (workdir / f"{i}.t").read_text().split())
        slurm_start = parse_time(rows[jid][2])
        if len(runs) > 1:
            # Slurm shows the last run's start; the order compared is the first starts'.
            slurm_start = float(math.floor(logged.get(jid, {}).get("start", start)))
        else:
            # Slurm's own whole-second stamps must agree with the job's to the second.
            for mine, slurm in ((start, slurm_start), (end, parse_time(rows[jid][3]))):
                if slurm is None or not -1.0 <= mine - slurm <= 2.0:
                    raise SystemExit(f"job {jid}: its own time {mine:.3f} and Slurm's {slurm} "
                                     "disagree")
        ev = logged.get(jid, {})
        if {"submit", "start", "done"} <= set(ev):
            sub, st, en = ev["submit"], ev["start"], ev["done"]
        else:
            sub, st, en = at, start, end
        kinds = done_restarts.get(jid, [])
        real.append(RealJob(job=j, job_id=jid, submit=sub, start=st, end=en,
                            deadline=_stated_deadline(rows[jid][5], deadline),
                            nodes=rows[jid][4], slurm_start=slurm_start,
                            payload=(start, end), runs=runs,
                            resizes=kinds.count("requeue_hold"),
                            preemptions=kinds.count("preempt_requeue"), waits=waits))
    bf = None
    if lines:
        bf = slurm_timing(lines, real, t0 - 5.0, max(r.end for r in real) + 5.0)
    return real, daemon_timing(workdir / "daemon.log", db), bf


def _log_events(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    """An elastic replay job's log (sim_to_real_job.py), line by line: its kind (start,
    checkpoint, done) and its key=value fields, for lines that carry a stamp t=."""
    for line in text.splitlines():
        kind, *rest = line.split() or [""]
        fields = dict(f.split("=", 1) for f in rest if "=" in f)
        if "t" in fields:
            yield kind, fields


def job_runs(text: str) -> tuple[tuple[tuple[float, int], ...], float | None]:
    """From an elastic replay job's log: each run's start stamp and GPU count, and the stamp
    of its end (None: it did not finish)."""
    runs: list[tuple[float, int]] = []
    end = None
    for kind, fields in _log_events(text):
        if kind == "start" and "gpus" in fields:
            runs.append((float(fields["t"]), int(fields["gpus"])))
        elif kind == "done":
            end = float(fields["t"])
    return tuple(runs), end


def signal_waits(text: str, grace_s: float = 0.0) -> tuple[float, ...]:
    """From an elastic replay job's log: per restart, the time from its checkpoint on the
    daemon's signal to its next start. The signal that led to the restart is the last
    checkpoint at least `grace_s` before that start: a signal whose restart was dropped is
    followed by another, and a second signal within the grace is not the one it waited for."""
    waits: list[float] = []
    checkpoints: list[float] = []
    for kind, fields in _log_events(text):
        if kind == "checkpoint":
            checkpoints.append(float(fields["t"]))
        elif kind == "start" and checkpoints:
            t = float(fields["t"])
            ok = [c for c in checkpoints if c <= t - grace_s] or checkpoints[:1]
            waits.append(round(t - ok[-1], 3))
            checkpoints = []
    return tuple(waits)


def _restarts_done(db: Path) -> dict[str, list[str]]:
    """Per job id, the daemon's requeues that were carried out (action log, DONE), oldest
    first: "requeue_hold" (a resize) or "preempt_requeue" (a preemption)."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT j.job_id, lower(a.kind) FROM actions a JOIN action_jobs j ON "
            "j.action_id = a.id WHERE lower(a.kind) IN ('requeue_hold', 'preempt_requeue') "
            "AND lower(a.status) = 'done' ORDER BY a.id").fetchall()
    out: dict[str, list[str]] = {}
    for job_id, kind in rows:
        out.setdefault(str(job_id), []).append(str(kind))
    return out


def _squeue(ids: list[str]) -> dict[str, list[str]]:
    """Per job id: state, submit, start, end, nodes and comment (last: it may hold '|')."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o",
                          "%i|%T|%V|%S|%e|%N|%k"], capture_output=True, text=True, check=True)
    rows = (line.split("|", 6) for line in out.stdout.splitlines())
    return {r[0]: r[1:] for r in rows}


def _stated_deadline(comment: str, asked: float | None) -> float | None:
    """The deadline as the daemon reads it (rlsbatch writes whole epoch seconds: `+Ns` counts
    from the second it runs in), not the instant `+Ns` was asked at: a replay's deadlines are
    a few seconds apart, and two within a second of each other tie live."""
    intent = decode_comment(comment).intent
    if asked is None or intent is None or intent.deadline is None:
        return asked
    return intent.deadline


@dataclass(frozen=True, kw_only=True)
class SimModel:
    """What the simulator is told about the real cluster (each part can be switched off to see
    what it is worth)."""

    placement: str = CONS_TRES
    conservative: bool = True
    daemon_timing: bool = True
    slurm_timing: bool = True
    measured_durations: bool = True
    """Each job's run time as slurmctld saw it (start to completion in its log: the sleep
    plus 20-80 ms of launch and completion); False: the sleep plus the median launch
    latency."""
    release_s: float = RELEASE_S
    """GPUs stay held this long after slurmctld logs a completion."""
    will_run_window_s: float = WILL_RUN_WINDOW_S
    """Backfill plans a blocked job as slurmctld's will-run test does: running jobs free
    their GPUs in batches (`EngineConfig.will_run_window_s`); 0: each at its own end."""


def _trace_job(r: RealJob, t0: float, model: SimModel, launch_s: float) -> TraceJob:
    deadline = None if r.deadline is None else r.deadline - t0
    if r.job.steps is None:
        return TraceJob(id=r.job_id, submit=r.submit - t0,
                        duration=(r.end - r.start if model.measured_durations else r.job.seconds)
                        + model.release_s,
                        gpus=r.job.gpus, time_limit_s=TIME_LIMIT_MIN * 60.0, deadline=deadline)
    # A job in steps: its run time follows from the GPUs the simulated policy gives it (the
    # profiled rate, as the job's own), plus its launch and exit as slurmctld saw them (from
    # its start to the job's first stamp, and from its last stamp to its completion; else the
    # median launch) and the release after it ends.
    overhead, speed = launch_s, 1.0
    if model.measured_durations and r.payload:
        overhead = (r.payload[0] - r.start) + (r.end - r.payload[1])
        if len(r.runs) == 1 and r.payload[1] > r.payload[0]:
            # One run: its steps took what they took (the job's sleeps and reports run a few
            # ms off the profiled rate, and a few ms decide which daemon cycle sees the end).
            speed = r.job.steps / step_rate(r.runs[0][1]) / (r.payload[1] - r.payload[0])
    return TraceJob(id=r.job_id, submit=r.submit - t0,
                    duration=r.job.steps / step_rate(r.job.gpus) / speed + overhead
                    + model.release_s,
                    gpus=r.job.gpus, time_limit_s=TIME_LIMIT_MIN * 60.0, deadline=deadline,
                    total_steps=r.job.steps, model=MODEL, batch_size=BATCH,
                    gpus_min=r.job.gpus if r.job.elastic else None,
                    gpus_max=r.job.gpus_max if r.job.elastic else None, elastic=r.job.elastic)


def run_sim(real: list[RealJob], policy: str, timing: DaemonTiming | None,
            slurm: SlurmTiming | None, model: SimModel, restarts: Restarts | None = None,
            jitter: tuple[float, int] | None = None, measured_grace: bool = True
            ) -> tuple[SimOut, tuple[int, int], dict[str, tuple[float, ...]]]:
    """The simulated replay: each job's start, end and first nodes, the resizes and
    preemptions the simulated daemon carried out, and per job the time from each restart's
    signal to the next run (a run's end is its grace's end: the signal was sim_grace_s
    before). `jitter` (sigma seconds, seed): each job's run time and each daemon cycle's
    instant moved by a normal draw, to see how far the simulator's own schedule moves with
    noise that small (`--noise-floor`)."""
    from slurm_rl import policies

    t0 = min(r.submit for r in real)
    launch = slurm.launch_s if slurm and slurm.launch_s else 0.0
    trace = [_trace_job(r, t0, model, launch) for r in real]
    use = timing if model.daemon_timing else None
    if jitter is not None:
        rng = random.Random(jitter[1])
        trace = [dataclasses.replace(
            tj, duration=max(0.01, tj.duration + rng.gauss(0.0, jitter[0]))) for tj in trace]
        if use is not None and use.starts:  # and when each cycle saw the cluster
            moved = sorted(t + rng.gauss(0.0, jitter[0]) for t in use.starts)
            use = dataclasses.replace(use, starts=tuple(moved))
    bf = slurm.backfill if slurm and model.slurm_timing else None
    main = slurm.main if slurm and model.slurm_timing and bf else None

    def rel(c: Cycle | None) -> tuple[float, ...]:
        return () if c is None else tuple(t - t0 for t in c.times)
    cfg = EngineConfig(nodes=NODES, gpus_per_node=GPUS_PER_NODE, tick_s=1.0,
                       decide_on_events=False, conservative=model.conservative,
                       placement=model.placement, cpus_per_node=CPUS_PER_NODE,
                       tick_phase_s=None if use is None else (use.phase_s - t0) % 1.0,
                       tick_times_s=() if use is None else tuple(t - t0 for t in use.starts),
                       decision_delay_s=0.0 if use is None else use.delay_s,
                       decision_delays_s=() if use is None else use.delays,
                       bf_interval_s=0.0 if bf is None else bf.period_s,
                       bf_phase_s=0.0 if bf is None else (bf.anchor_s - t0) % bf.period_s,
                       sched_interval_s=0.0 if main is None else main.period_s,
                       sched_phase_s=0.0 if main is None else (main.anchor_s - t0) % main.period_s,
                       bf_times_s=rel(bf), sched_times_s=rel(main),
                       launch_delay_s=0.0 if model.measured_durations or not slurm
                       else slurm.launch_s or 0.0,
                       time_limit=TimeLimitEstimate(fixed_s=TIME_LIMIT_MIN * 60.0),
                       will_run_window_s=model.will_run_window_s, clock_origin_s=t0)
    if restarts is not None and measured_grace and use is not None and use.graces:
        restarts = dataclasses.replace(restarts, sim_grace_s=statistics.median(use.graces))
    if restarts is not None:
        cfg = dataclasses.replace(
            cfg, launch_delay_s=0.0, restart_rules=True,
            max_restarts_per_hour=restarts.max_per_hour, restart_grace_s=restarts.sim_grace_s,
            requeue_s=restarts.requeue_s, restart_delay_s=restarts.restore_s)
    result = Simulator(trace, policies.make(policy), cfg).run()
    first: dict[str, str] = {}
    ends: dict[str, float] = {}
    waits: dict[str, list[float]] = {}
    grace = restarts.sim_grace_s if restarts is not None else 0.0
    for iv in sorted(result.intervals, key=lambda iv: iv.start):
        first.setdefault(iv.job_id, _nodelist(iv.nodes))
        if iv.job_id in ends:
            waits.setdefault(iv.job_id, []).append(round(iv.start - ends[iv.job_id] + grace, 3))
        ends[iv.job_id] = iv.end
    # The simulated job holds its GPUs until the release; it completed release_s before.
    return ({j.job_id: (j.start + t0, j.end + t0 - model.release_s, first.get(j.job_id, ""))
             for j in result.jobs}, (result.resizes, result.preemptions),
            {k: tuple(v) for k, v in waits.items()})


def _apart(real: list[RealJob], sim: SimOut, other: SimOut) -> tuple[float, float]:
    """Kendall τ-b of two simulated schedules' start orders (whole seconds, as `compare`
    reads Slurm's) and the mean relative difference of their JCTs."""
    xs = [float(math.floor(sim[r.job_id][0])) for r in real]
    ys = [float(math.floor(other[r.job_id][0])) for r in real]
    diffs = [abs(other[r.job_id][1] - sim[r.job_id][1]) / (sim[r.job_id][1] - r.submit)
             for r in real]
    return kendall_tau_b(xs, ys), sum(diffs) / len(diffs)


def saved_restarts(path: Path) -> Restarts | None:
    """The restart settings a saved elastic replay ran with (None: a replay of sleep jobs)."""
    for data in json.loads(path.read_text()).values():
        if isinstance(data, dict) and data.get("restarts"):
            return Restarts(**data["restarts"])
    return None


def _mean_s(values: list[float]) -> str:
    return f"{sum(values) / len(values):.1f} s" if values else "-"


def _nodelist(nodes: tuple[str, ...]) -> str:
    """Slurm's compact form for node1..node4: node3, node[1-2], node[1,3]."""
    nums = sorted(int(n.removeprefix("node")) for n in nodes)
    if len(nums) == 1:
        return f"node{nums[0]}"
    if nums == list(range(nums[0], nums[-1] + 1)):
        return f"node[{nums[0]}-{nums[-1]}]"
    return "node[" + ",".join(map(str, nums)) + "]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="fifo,deadline")
    ap.add_argument("--trace", default="itp-deadline-cluster10.csv")
    ap.add_argument("--start", type=int, default=100)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--median-s", type=float, default=12.0)
    ap.add_argument("--min-s", type=int, default=4)
    ap.add_argument("--max-s", type=int, default=45)
    ap.add_argument("--load", type=float, default=2.0)
    ap.add_argument("--placement", choices=PLACEMENTS, default=CONS_TRES,
                    help="the simulator's node choice (default: Slurm's cons_tres)")
    ap.add_argument("--easy", action="store_true",
                    help="simulate EASY backfill instead of slurmctld's conservative backfill")
    ap.add_argument("--no-daemon-timing", action="store_true",
                    help="do not tell the simulator when the daemon's cycles ran (policy ticks "
                    "at 1 s from the first event, decisions applied at once)")
    ap.add_argument("--no-slurm-timing", action="store_true",
                    help="do not tell the simulator when slurmctld's scheduler cycles ran "
                    "(a full pass at every event instead)")
    ap.add_argument("--nominal-durations", action="store_true",
                    help="give the simulator each job's sleep plus the median launch latency "
                    "instead of its run time as slurmctld saw it")
    ap.add_argument("--release-s", type=float, default=RELEASE_S,
                    help="how long GPUs stay held after slurmctld logs a completion "
                    "(default %(default)s)")
    ap.add_argument("--will-run-window", type=float, default=WILL_RUN_WINDOW_S,
                    metavar="S", help="the window of slurmctld's will-run batches (default "
                    "%(default)s, Slurm 22.05's; 0: every running job frees its GPUs at its "
                    "own end)")
    ap.add_argument("--elastic-every", type=int, default=0, metavar="K",
                    help="an elastic replay: every job works in steps at its GPUs' profiled "
                    "rate, every K-th is --rl-elastic, and the daemon resizes and preempts "
                    "(default 0: sleep jobs, no restarts)")
    ap.add_argument("--grace", type=float, default=Restarts.grace_s,
                    help="an elastic replay: the daemon's [resize] grace_s (default "
                    "%(default)s)")
    ap.add_argument("--sim-grace", type=float, default=None,
                    help="the simulator's grace step (default: the replay's own, the median "
                    f"signal-to-requeue time in the daemon's action log; else "
                    f"{Restarts.sim_grace_s}, grace plus half a daemon cycle)")
    ap.add_argument("--requeue-s", type=float, default=Restarts.requeue_s,
                    help="the simulator's requeue step (default %(default)s)")
    ap.add_argument("--restore-s", type=float, default=Restarts.restore_s,
                    help="the simulator's restore step (default %(default)s)")
    ap.add_argument("--resim", type=Path, metavar="RAW.json",
                    help="no cluster: simulate a replay saved with --raw again (to compare "
                    "simulator models on the same real run)")
    ap.add_argument("--noise-floor", type=int, default=0, metavar="K",
                    help="also simulate each replay K more times with every job's run time "
                    "and every daemon cycle's instant moved by a normal draw of --noise-ms, "
                    "and print how far those schedules are from the simulator's own (the "
                    "agreement no model can beat when a few ms decide the order)")
    ap.add_argument("--noise-ms", type=float, default=20.0,
                    help="sigma of --noise-floor's draws in ms (default %(default)s: the "
                    "spread of the replay jobs' own run times around their profiled rate, and "
                    "about half a daemon poll)")
    ap.add_argument("--out", type=Path, help="write a Markdown report here")
    ap.add_argument("--raw", type=Path, help="write real and simulated times (JSON) here")
    ap.add_argument("--force", action="store_true",
                    help="let --raw and --out replace an existing file (the shipped replays)")
    args = ap.parse_args()
    for name in ("raw", "out"):  # before minutes of replay, and never a shipped file silently
        target = getattr(args, name)
        if target is not None and target.exists() and not args.force:
            ap.error(f"--{name} {target} exists (a saved replay? --force replaces it)")
        if target is not None and not target.parent.is_dir():
            ap.error(f"--{name} {target}: folder {target.parent} does not exist")
    model = SimModel(placement=args.placement,
                     conservative=not args.easy, daemon_timing=not args.no_daemon_timing,
                     slurm_timing=not args.no_slurm_timing,
                     measured_durations=not args.nominal_durations, release_s=args.release_s,
                     will_run_window_s=args.will_run_window)
    sim_grace = Restarts.sim_grace_s if args.sim_grace is None else args.sim_grace
    restarts = (Restarts(grace_s=args.grace, sim_grace_s=sim_grace,
                         requeue_s=args.requeue_s, restore_s=args.restore_s)
                if args.elastic_every > 0 else None)
    if args.resim:
        saved = load_raw(args.resim)
        todo = [(p, *saved[p]) for p in args.policies.split(",") if p in saved]
        daemon_side = saved_restarts(args.resim)
        if daemon_side is not None:  # the daemon's part as it ran; the simulator's as given
            restarts = dataclasses.replace(
                daemon_side, sim_grace_s=sim_grace, requeue_s=args.requeue_s,
                restore_s=args.restore_s)
    else:
        if not os.environ.get("SLURM_CONF"):
            raise SystemExit("set SLURM_CONF (eval \"$(docker/cluster env)\")")
        jobs = compressed_workload(args.trace, args.start, args.count, args.median_s,
                                   args.min_s, args.max_s, args.load, args.elastic_every)
        todo = []
        for policy in args.policies.split(","):
            print(f"== {policy}: replaying {len(jobs)} jobs on the test cluster", flush=True)
            real, timing, bf = run_real(jobs, policy, prefix=f"s2r{os.getpid()}-{policy}-",
                                        restarts=restarts)
            todo.append((policy, real, timing, bf))
    results, raw = {}, {}
    counts: dict[str, tuple[int, int, int, int]] = {}
    gaps: dict[str, tuple[list[float], list[float]]] = {}
    floors: dict[str, list[tuple[float, float]]] = {}
    for policy, real, timing, bf in todo:
        measured = args.sim_grace is None
        sim, (sim_resizes, sim_preempts), sim_waits = run_sim(real, policy, timing, bf, model,
                                                              restarts, measured_grace=measured)
        results[policy] = compare(real, sim)
        if args.noise_floor > 0:
            floors[policy] = [_apart(real, sim, run_sim(
                real, policy, timing, bf, model, restarts, measured_grace=measured,
                jitter=(args.noise_ms / 1000.0, k))[0]) for k in range(args.noise_floor)]
        counts[policy] = (sum(r.resizes for r in real), sim_resizes,
                          sum(r.preemptions for r in real), sim_preempts)
        gaps[policy] = ([w for r in real for w in r.waits],
                        [w for ws in sim_waits.values() for w in ws])
        raw[policy] = {"daemon": asdict(timing) if timing else None,
                       "slurm": asdict(bf) if bf else None,
                       "restarts": asdict(restarts) if restarts else None,
                       "sim_resizes": sim_resizes, "sim_preemptions": sim_preempts, "jobs": [
            {"job_id": r.job_id, "gpus": r.job.gpus, "sleep": r.job.seconds,
             "steps": r.job.steps, "gpus_max": r.job.gpus_max, "elastic": r.job.elastic,
             "submit": r.submit, "deadline": r.deadline,
             "real_start": r.start, "real_end": r.end, "real_nodes": r.nodes,
             "slurm_start": r.slurm_start, "payload": r.payload, "runs": r.runs,
             "resizes": r.resizes, "preemptions": r.preemptions, "waits": r.waits,
             "sim_waits": sim_waits.get(r.job_id, ()),
             "sim_start": sim[r.job_id][0], "sim_end": sim[r.job_id][1],
             "sim_nodes": sim[r.job_id][2]}
            for r in real]}
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
        print(f"wrote {args.raw} (every job's real and simulated times)")
    lines = ["| policy | jobs | Kendall τ-b (start) | mean JCT error | p90 JCT error "
             "| same first nodes | mean real JCT |" + (
                 " resizes real/sim | preemptions real/sim | signal to running again, "
                 "mean real/sim |" if restarts else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|---|" if restarts else "")]
    for p, r in results.items():
        row = (f"| {p} | {r['jobs']} | {r['kendall_tau_b']:.3f} | "
               f"{100 * r['mean_jct_error']:.1f} % | {100 * r['p90_jct_error']:.1f} % "
               f"| {r['same_first_nodes']} | {r['mean_real_jct_s']:.0f} s |")
        if restarts:
            c = counts[p]
            row += f" {c[0]} / {c[1]} | {c[2]} / {c[3]} | {_mean_s(gaps[p][0])} / " \
                   f"{_mean_s(gaps[p][1])} |"
        lines.append(row)
    if floors:
        lines += ["", "Noise floor: the simulator against itself with every job's run time and "
                  f"every daemon cycle's instant moved by a normal draw of sigma "
                  f"{args.noise_ms:g} ms ({args.noise_floor} draws)", "",
                  "| policy | Kendall τ-b: mean | min | mean JCT difference: mean | max |",
                  "|---|---|---|---|---|"]
        for p, got in floors.items():
            taus, errs = [t for t, _ in got], [e for _, e in got]
            lines.append(f"| {p} | {sum(taus) / len(taus):.3f} | {min(taus):.3f} | "
                         f"{100 * sum(errs) / len(errs):.1f} % | {100 * max(errs):.1f} % |")
    print("\n".join(lines), flush=True)
    if args.out:
        cmd = "python benchmarks/sim_to_real.py " + " ".join(sys.argv[1:])
        args.out.write_text("\n".join(lines) + f"\n\nCommand: `{cmd}`\n")


if __name__ == "__main__":
    main()
