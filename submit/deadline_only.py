"""Deadline only: `rlsbatch --rl-deadline +6h --rl-model NAME job.sh`, no GPU or CPU request.

Such a job is submitted *held* (`--hold`), asking for no GPUs, with the GPU range
1..M in its intent, M = the site's `[sizing] max_gpus` (8 unless the config file says
otherwise) capped at the partition's GPUs. The slurm-rl daemon sizes it: it gives it the GPU
count its policy picks in that range and the site's CPUs per GPU, then releases it
(slurm_rl/daemon/sizing.py). Until a daemon does, the job stays held: rlsbatch says so when the
daemon's last cycle is not recent.

The form applies to a job with `--rl-deadline`, without `--rl-gpus` or `--rl-inference`, with
no GPU option (--gres=gpu…, --gpus, --gpus-per-node/-task/-socket, their SBATCH_* variables,
#SBATCH lines), no CPU, task or node option (`CPU_OPTIONS`), and not an array. A job that asks
for CPUs (or is an array) and gives a deadline is submitted as before, with its own request.
Without `--rl-model`, the bare form is refused: the daemon sizes a job by its model's speed-up.

Standard library only (tomllib for the one config key; feedback.py for the snapshot).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from slurm_rl.submit.cmdline import Opt
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.gpus import PartitionGpus, effective, gres_gpu_count, partition_gpus
from slurm_rl.submit.sbatch_options import GPU_ENV, GPU_OPTIONS

if TYPE_CHECKING:
    from slurm_rl.submit.feedback import Snapshot

DEFAULT_MAX_GPUS = 8
"""`[sizing] max_gpus`'s default in slurm_rl.config (a test keeps the two equal)."""

CPU_OPTIONS = ("cpus-per-task", "ntasks", "ntasks-per-node", "ntasks-per-socket",
               "ntasks-per-core", "ntasks-per-gpu", "mincpus", "cpus-per-gpu", "nodes",
               "exclusive")
"""sbatch options that ask for CPUs, tasks or nodes: with one, the job is not deadline-only."""

CPU_ENV = {"cpus-per-gpu": "SBATCH_CPUS_PER_GPU", "exclusive": "SBATCH_EXCLUSIVE"}

NO_MODEL = ("--rl-deadline: a job with no GPU or CPU request is sized by the slurm-rl daemon "
            "from its model: give --rl-model NAME (and --rl-steps N, or -t, for its run time), "
            "or ask for GPUs (--gres=gpu:N, --rl-gpus MIN-MAX)")


def resource_request(cmdline: list[Opt], env: Mapping[str, str], script: list[Opt]
                     ) -> Opt | None:
    """The first GPU, CPU, task or node request sbatch will see, else None."""
    for name in GPU_OPTIONS:
        said = effective(name, cmdline, env, script, GPU_ENV.get(name))
        if said is not None and (name != "gres" or gres_gpu_count(said.value or "")):
            return said
    for name in CPU_OPTIONS:
        said = effective(name, cmdline, env, script, CPU_ENV.get(name))
        if said is not None:
            return said
    return None


def applies(has_deadline: bool, has_range: bool, inference: bool, cmdline: list[Opt],
            env: Mapping[str, str], script: list[Opt]) -> bool:
    """Whether this submission is the deadline-only form (module docstring)."""
    if not has_deadline or has_range or inference:
        return False
    if effective("array", cmdline, env, script, "SBATCH_ARRAY_INX") is not None:
        return False
    return resource_request(cmdline, env, script) is None


def site_max_gpus() -> int:
    """`[sizing] max_gpus` from the config file the daemon reads ($SLURM_RL_CONFIG, else
    /etc/slurm-rl/slurm-rl.toml), read with tomllib alone; the default when the file or key
    is missing or not a whole number 1..4096 (the daemon validates the file and applies its
    own value again)."""
    from slurm_rl.submit.feedback import DEFAULT_CONFIG

    path = os.environ.get("SLURM_RL_CONFIG") or (
        DEFAULT_CONFIG if os.path.isfile(DEFAULT_CONFIG) else "")
    if not path:
        return DEFAULT_MAX_GPUS
    import tomllib

    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh).get("sizing")
    except (OSError, ValueError):
        return DEFAULT_MAX_GPUS
    value = table.get("max_gpus") if isinstance(table, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        return DEFAULT_MAX_GPUS
    return value


def gpu_range(cmdline: list[Opt], env: Mapping[str, str], script: list[Opt],
              query: Callable[[], PartitionGpus]) -> tuple[int, int]:
    """(1, M): the range the daemon sizes the job in; UsageError when the partition has no
    GPUs. A partition sinfo does not show is sbatch's to refuse, with its own message."""
    parts = query()
    said = effective("partition", cmdline, env, script, "SBATCH_PARTITION")
    if said and said.value and any(p not in parts for p in said.value.split(",") if p):
        return 1, site_max_gpus()
    where, total, _ = partition_gpus("--rl-deadline", cmdline, env, script, lambda: parts)
    if total < 1:
        raise UsageError(f"--rl-deadline: partition {where} has no GPUs for the slurm-rl daemon "
                         "to size this job with; ask for CPUs (-c N) or another partition")
    return 1, min(site_max_gpus(), total)


def feedback(*, deadline: float, hard: bool, max_gpus: int, time_limit_s: float | None,
             total_steps: int | None, model: str | None, batch_size: int | None, now: float,
             force: bool, snapshot: Snapshot | None = None) -> tuple[list[str], str | None]:
    """(lines for stderr, the refusal or None) for a deadline-only job: that the daemon sizes
    it, whether the daemon runs (else the job stays held), and the fewest GPUs predicted to
    meet the deadline from the daemon's latest view (feedback.py's estimate)."""
    from slurm_rl.submit import feedback as fb

    head = (f"rlsbatch: submitted held: the slurm-rl daemon picks this job's GPUs (1-{max_gpus})"
            " and CPUs, then releases it")
    snap = snapshot
    if snap is None:
        try:
            path, stale = fb.locate()
            snap = fb.read_snapshot(path, now, stale)
        except fb.Unavailable as exc:
            return [head, f"rlsbatch: warning: {exc}: the job stays held until the daemon "
                    "runs"], None
    age = f"daemon's view {fb._dur(now - snap.at)} old"
    counts = [g for g in (*range(1, 9), 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
              if g <= max_gpus] or [1]
    if counts[-1] != max_gpus and max_gpus > 8:
        counts.append(max_gpus)
    last: tuple[int, float, float | None] | None = None
    for g in counts:
        run_s, _ = fb.run_time(total_steps, model, batch_size, g, time_limit_s)
        if run_s is None:
            return [head + f"; finish unknown (give --rl-steps, or -t) ({age})"], None
        start, finish = fb.predict(snap, now, g, run_s, deadline)
        if math.isinf(start) or finish is None:
            continue
        last = (g, start, finish)
        if finish <= deadline:
            return [head + f"; {g} GPU{'' if g == 1 else 's'} predicted to meet the deadline "
                    f"{fb.when(deadline)} (start {fb.when(start)}, finish {fb.when(finish)}; "
                    f"{age})"], None
    if last is None:
        return [head + f"; no prediction: the jobs ahead have no time limit or progress "
                f"({age})"], None
    g, start, finish = last
    assert finish is not None
    late = (f"the deadline {fb.when(deadline)} looks infeasible even at {g} GPUs (start "
            f"{fb.when(start)}, finish {fb.when(finish)}; {age})")
    if not hard or force:
        why = "--rl-force" if hard else "a soft deadline"
        return [head + f"; {late}; submitted anyway ({why})"], None
    later = math.ceil((finish + 60) / 600) * 600
    import time

    return [], (f"--rl-deadline: {late}; it would be met with --rl-deadline "
                f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(later))}; --rl-force submits "
                "anyway")
