"""Feedback at submission: when will a job with `--rl-deadline` start and finish, and does its
deadline look feasible? Read from the daemon's latest snapshot in its database, read-only.

The estimate (docs/rlsbatch.md, "Feedback at submission"), cluster-wide GPU counts, no node
placement:
- GPUs: the usable nodes the daemon saw in its last cycle.
- Running jobs end at their predicted end: from reported progress (steps left / rate), capped
  by start + time limit; neither known: never (so no prediction).
- Jobs ahead of the new one: pending jobs the daemon manages with an earlier deadline, or of
  class critical, in deadline order, each starting when enough GPUs are free and running for
  its time limit. Jobs without a deadline are taken to go after it (deadline-first ordering).
- The new job runs for `--rl-steps` at its model's profiled throughput (perfmodel, with
  `--rl-model`), else for its time limit (`-t`); neither: the start only.
If the daemon's last cycle is older than `stale_after_s` (3 × [daemon] interval_s, at least
2 minutes), or its database can not be read, this says so and predicts nothing.

Standard library only (sqlite3; perfmodel, itself stdlib, only with --rl-model): this runs on
every rlsbatch with a deadline, within a 50 ms budget (benchmarks/bench_rlsbatch.py --deadline).
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_rl.submit.cmdline import Opt

DB_ENV = "SLURM_RL_DB"
"""Overrides the database path from the config ([database] path)."""

MIN_STALE_S = 120.0
DEFAULT_CONFIG = "/etc/slurm-rl/slurm-rl.toml"
DEFAULT_DB = "/var/lib/slurm-rl/slurm-rl.db"
DEFAULT_INTERVAL_S = 10.0
"""The defaults of slurm_rl.config (a test keeps them equal)."""



class Unavailable(Exception):
    """No prediction: the one-line reason (no database, daemon not running recently, …)."""


class Snapshot:
    """What the daemon last saw: GPUs, running jobs (end, GPUs), pending jobs."""

    __slots__ = ("at", "gpus_total", "running", "pending")

    def __init__(self, at: float, gpus_total: int, running: list[tuple[float, int]],
                 pending: list[tuple[float, int, float]]) -> None:
        self.at = at
        self.gpus_total = gpus_total
        self.running = running
        """(predicted end, GPUs); end = inf when unknown."""
        self.pending = pending
        """Jobs ahead of a new one, as (deadline or -inf for critical, GPUs, run time)."""


def locate() -> tuple[str, float]:
    """(database path, stale_after_s): $SLURM_RL_DB, else the config file's [database] path
    (the file `slurm_rl.config.config_path` picks: $SLURM_RL_CONFIG, else
    /etc/slurm-rl/slurm-rl.toml); [daemon] interval_s sets the staleness. Read with tomllib
    alone, not slurm_rl.config (whose imports cost more than this whole feedback), so only
    those two keys are looked at; the daemon itself validates the file."""
    import tomllib

    path = os.environ.get("SLURM_RL_CONFIG") or (
        DEFAULT_CONFIG if os.path.isfile(DEFAULT_CONFIG) else "")
    data: dict[str, object] = {}
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, ValueError) as exc:
            raise Unavailable(f"can't read the slurm-rl config {path}: {exc}") from None
    db_table, daemon_table = data.get("database"), data.get("daemon")
    db = db_table.get("path") if isinstance(db_table, dict) else None
    interval = daemon_table.get("interval_s") if isinstance(daemon_table, dict) else None
    if not isinstance(interval, int | float) or isinstance(interval, bool):
        interval = DEFAULT_INTERVAL_S
    stale = max(MIN_STALE_S, 3 * float(interval))
    if os.environ.get(DB_ENV):
        return os.environ[DB_ENV], stale
    if not isinstance(db, str) or not db:
        return DEFAULT_DB, stale
    db = os.path.expanduser(db)
    return os.path.join(os.path.dirname(os.path.abspath(path)), db) if path else db, stale


def read_snapshot(path: str, now: float, stale_after_s: float) -> Snapshot:
    """The daemon's latest view, read-only; raises Unavailable with the reason."""
    import sqlite3

    if not os.path.exists(path):
        raise Unavailable(f"no slurm-rl database at {path} (is the daemon running here?)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.2)
    except sqlite3.Error as exc:
        raise Unavailable(f"can't read the slurm-rl database {path}: {exc}") from None
    from slurm_rl.states import JobState, NodeState  # (only here: ~1 ms of enum)

    usable = tuple(s.value for s in NodeState if s.usable)
    pending_states = tuple(s.value for s in JobState if s.is_pending)
    running_states = tuple(s.value for s in JobState if s.is_running)
    try:
        at = con.execute("SELECT max(at) FROM decisions").fetchone()[0]
        if at is None:
            raise Unavailable("the slurm-rl daemon has not completed a cycle yet")
        if now - at > stale_after_s:
            raise Unavailable(f"the slurm-rl daemon's last cycle was {_dur(now - at)} ago, so "
                              "its view of the queue is out of date")
        q = ",".join("?" * len(usable))
        total = con.execute(f"SELECT coalesce(sum(gpus_total), 0) FROM nodes WHERE state IN "
                            f"({q}) AND last_seen_at >= ?", (*usable, at - 1.0)).fetchone()[0]
        running = []
        q = ",".join("?" * len(running_states))
        for start, limit, gpus, done, steps, rate, reported in con.execute(
                "SELECT j.start_time, j.time_limit_s, j.gpus, p.steps_done, p.steps_total, "
                "p.rate, p.reported_at FROM jobs j LEFT JOIN job_progress p USING (job_id) "
                f"WHERE j.state IN ({q}) AND j.gpus > 0", running_states):
            end = math.inf
            if start is not None and limit is not None:
                end = start + limit
            if steps is not None and rate and rate > 0 and reported is not None:
                end = min(end, reported + max(0, steps - done) / rate)
            running.append((max(end, now), int(gpus)))
        pending = []
        q = ",".join("?" * len(pending_states))
        for deadline, klass, gpus, limit in con.execute(
                "SELECT deadline, service_class, gpus, time_limit_s FROM jobs WHERE managed "
                f"AND state IN ({q}) AND gpus > 0 AND (deadline IS NOT NULL OR "
                "service_class = 'critical')", pending_states):
            key = -math.inf if klass == "critical" else float(deadline)
            pending.append((key, int(gpus), math.inf if limit is None else float(limit)))
    except sqlite3.Error as exc:
        raise Unavailable(f"can't read the slurm-rl database {path}: {exc}") from None
    finally:
        con.close()
    return Snapshot(float(at), int(total), running, pending)


def predict(snap: Snapshot, now: float, gpus: int, run_s: float | None, deadline: float
            ) -> tuple[float, float | None]:
    """(start, finish) of a new job of `gpus` GPUs and `run_s` seconds (None: unknown finish)
    with deadline `deadline`; start = inf when it never gets its GPUs in this estimate."""
    if gpus > snap.gpus_total:
        return math.inf, None
    free = snap.gpus_total - sum(g for _, g in snap.running)
    ends = list(snap.running)
    heapq.heapify(ends)
    t = now
    ahead = sorted((k, g, r) for k, g, r in snap.pending if k < deadline)
    for _, g, r in [*ahead, (deadline, gpus, run_s if run_s is not None else math.inf)]:
        if g > snap.gpus_total:
            continue  # never starts: holds nothing
        while free < g:
            if not ends:
                return math.inf, None
            end, held = heapq.heappop(ends)
            t, free = max(t, end), free + held
        if math.isinf(t):
            return math.inf, None
        free -= g
        heapq.heappush(ends, (t + r, g))
    return t, None if run_s is None else t + run_s


def run_time(total_steps: int | None, model: str | None, batch_size: int | None, gpus: int,
             time_limit_s: float | None) -> tuple[float | None, str]:
    """Predicted run time at `gpus` and where it comes from."""
    if total_steps is not None and model:
        from slurm_rl import perfmodel

        if model.lower() in perfmodel.curves():
            rate = perfmodel.curve_for(model, batch_size).throughput(max(gpus, 1))
            if rate > 0:
                return total_steps / rate, f"{total_steps} steps of {model}"
    if time_limit_s is not None:
        return time_limit_s, "its time limit"
    return None, ""


def scaled(run_s: float, model: str | None, batch_size: int | None, from_gpus: int,
           to_gpus: int) -> float:
    from slurm_rl import perfmodel

    factor = perfmodel.scaled_rate(1.0, max(from_gpus, 1), to_gpus, model, batch_size)
    return run_s / factor if factor > 0 else math.inf


def start_gpus(cmdline: list[Opt], env: Mapping[str, str], script: list[Opt],
               added: list[str]) -> int:
    """The GPUs a job starts with: rlsbatch's own `--gres=gpu:K` (and `--nodes=N`) for a GPU
    range, else sbatch's request (--gres, --gpus, --gpus-per-node; per node times the minimum
    --nodes), else none."""
    from slurm_rl.submit.gpus import effective, gres_gpu_count, min_nodes, typed_count
    from slurm_rl.submit.sbatch_options import GPU_ENV

    def opt(name: str) -> str | None:
        for word in reversed(added):
            if word.startswith(f"--{name}="):
                return word.split("=", 1)[1]
        said = effective(name, cmdline, env, script, GPU_ENV.get(name) or
                         {"nodes": "SBATCH_NODES"}.get(name))
        return said.value if said else None

    nodes_text = opt("nodes")
    nodes = (min_nodes(nodes_text) if nodes_text else None) or 1
    gres = opt("gres")
    if gres and (count := gres_gpu_count(gres)) is not None:
        return count * nodes
    per_node = opt("gpus-per-node")
    if per_node and (count := typed_count(per_node)) is not None:
        return count * nodes
    total = opt("gpus")
    return (typed_count(total) or 0) if total else 0


def parse_time_limit(text: str | None) -> float | None:
    """Slurm's -t/--time forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds;
    None for none, UNLIMITED/INFINITE, or a form sbatch will refuse anyway."""
    if not text:
        return None
    text = text.strip()
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isascii() or not d.isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not all(p.isascii() and p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    nums = [int(p) for p in parts]
    if days:  # D-HH[:MM[:SS]]
        h, m, s = (nums + [0, 0])[:3]
    elif len(nums) == 3:
        h, m, s = nums
    else:  # MM or MM:SS
        h, m, s = 0, nums[0], nums[1] if len(nums) == 2 else 0
    seconds = ((days * 24 + h) * 60 + m) * 60 + s
    return float(seconds) if seconds > 0 else None


def when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M%z", time.localtime(t))


def _dur(s: float) -> str:
    s = max(0, int(s))
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def assess(*, deadline: float, hard: bool, gpus: int, time_limit_s: float | None,
           total_steps: int | None, model: str | None, batch_size: int | None, now: float,
           force: bool, snapshot: Snapshot | None = None) -> tuple[list[str], str | None]:
    """(lines to show on stderr, the one-line refusal or None). Refuses only a hard deadline
    that looks infeasible, and only without `force`."""
    if snapshot is None:
        try:
            path, stale = locate()
            snapshot = read_snapshot(path, now, stale)
        except Unavailable as exc:
            return [f"rlsbatch: no prediction: {exc}"], None
    run_s, source = run_time(total_steps, model, batch_size, gpus, time_limit_s)
    start, finish = predict(snapshot, now, gpus, run_s, deadline)
    age = f"daemon's view {_dur(now - snapshot.at)} old"
    if math.isinf(start):
        return [f"rlsbatch: no prediction: the jobs ahead of this one have no time limit or "
                f"progress to predict from ({age})"], None
    if finish is None:
        return [f"rlsbatch: predicted start {when(start)}; finish unknown (give -t/--time, or "
                f"--rl-steps with --rl-model) ({age})"], None
    count = f"{gpus or 'no'} GPU{'' if gpus == 1 else 's'}"
    said = (f"predicted start {when(start)}, finish {when(finish)} ({count}, run time from "
            f"{source}; {age})")
    if finish <= deadline:
        return [f"rlsbatch: {said}: the deadline {when(deadline)} looks feasible "
                f"({_dur(deadline - finish)} to spare)"], None
    late = f"the deadline {when(deadline)} looks infeasible ({_dur(finish - deadline)} late)"
    if not hard:
        return [f"rlsbatch: {said}: {late}; submitted anyway (a soft deadline)"], None
    if force:
        return [f"rlsbatch: {said}: {late}; submitted anyway (--rl-force)"], None
    options = []
    g2 = _enough_gpus(snapshot, now, gpus, run_s, deadline, model, batch_size) if gpus else None
    if g2 is not None:
        options.append(f"{g2[0]} GPUs (finish {when(g2[1])})")
    later = math.ceil((finish + 60) / 600) * 600
    options.append(f"--rl-deadline {time.strftime('%Y-%m-%dT%H:%M', time.localtime(later))}")
    return [], (f"--rl-deadline: the hard deadline {when(deadline)} looks infeasible: "
                f"{said}; it would be met with {' or '.join(options)}; --rl-force submits "
                "anyway")


def _enough_gpus(snap: Snapshot, now: float, gpus: int, run_s: float | None, deadline: float,
                 model: str | None, batch_size: int | None) -> tuple[int, float] | None:
    """The smallest GPU count (of a few candidates) that meets the deadline, with its finish."""
    if run_s is None:
        return None
    candidates = list(range(gpus + 1, min(gpus + 8, snap.gpus_total) + 1))
    g = gpus + 8
    while g < snap.gpus_total:
        g *= 2
        candidates.append(min(g, snap.gpus_total))
    for g2 in candidates:
        _, finish = predict(snap, now, g2, scaled(run_s, model, batch_size, gpus, g2),
                            deadline)
        if finish is not None and finish <= deadline:
            return g2, finish
    return None
