"""Where the trainer's rollouts and `evaluate`'s simulation runs execute (`--executor`):

- `local`: in this process (one worker) or in N spawned processes;
- `slurm`: as Slurm jobs through submitit, one job array per batch of tasks (our users have a
  Slurm cluster: that is the engine to scale out on). The compute nodes must see the Python
  environment and `--slurm-folder` (pickles and logs) at the same paths as this host.

Every task is a pure function of its arguments (weights, scenario, seed), so the results do not
depend on where it ran: tests/rl/test_executor_slurm.py checks local == slurm on the test
cluster. Failures are one line (`ExecutorError`): sbatch refused the array, a task raised, or a
job ended (cancelled, timed out, node failure) without a result.

submitit learns job states from `sacct`, which a cluster without accounting storage does not
have; this module never asks submitit's watcher: it waits for each task's result file and, once
per poll, reads the states of all its tasks with one `squeue` call (`parse_squeue_states`).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import io
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from slurm_rl.states import JobState

T = TypeVar("T")
R = TypeVar("R")


class ExecutorKind(enum.Enum):
    LOCAL = "local"
    SLURM = "slurm"


class ExecutorError(RuntimeError):
    """A batch of tasks could not run; the message is one line."""


class TaskRunner(Protocol):
    """Runs a batch of independent tasks and returns their results in order."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...

    def close(self) -> None:
        """Release processes; remove what a successful run leaves behind. Idempotent."""


class LocalRunner:
    """`workers` <= 1: in this process; otherwise a pool of spawned processes."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self.workers <= 1:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"))
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@dataclass(frozen=True, kw_only=True)
class SlurmOptions:
    """How `SlurmRunner` submits (CLI: --slurm-*)."""

    folder: Path
    """submitit's pickles and the jobs' logs; removed after a successful run unless `keep`."""
    partition: str | None = None
    """None: the cluster's default partition."""
    job_name: str = "slurm-rl"
    time_min: int = 60
    """Each job's time limit (minutes)."""
    cpus_per_task: int = 1
    parallelism: int | None = None
    """Array tasks running at once (None: all)."""
    keep: bool = False
    poll_s: float = 1.0
    grace_s: float = 15.0
    """How long a task that Slurm says has ended may take to show its result file."""


def parse_squeue_states(text: str) -> dict[str, JobState]:
    """`squeue -h -r -t all -o %i|%T` output -> {"123_4": state}. Lines that do not parse
    (an unknown state, a combined "123_[5-9]" line) are left out: the task is then simply not
    known this poll."""
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        jid, sep, state = line.strip().partition("|")
        if not sep or "[" in jid:
            continue
        try:
            out[jid] = JobState.parse(state)
        except ValueError:
            continue
    return out


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


def _task_error(trace: str) -> str:
    """The exception line of a task's traceback (submitit wraps it in dashes and advice)."""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip() and set(ln.strip()) != {"-"}]
    body = [ln for ln in lines if not ln.startswith(("You can check", "or at paths", "- /",
                                                     "Job (task="))]
    return (body[-1] if body else _one_line(trace))[:300]


class SlurmRunner:
    """Each `map` is one Slurm job array (one task per item), submitted with submitit."""

    def __init__(self, opts: SlurmOptions) -> None:
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise ExecutorError("slurm: sbatch/squeue not found on PATH (is this a Slurm "
                                "submit host?)")
        import submitit

        self.opts = opts
        self._created = not opts.folder.exists()
        opts.folder.mkdir(parents=True, exist_ok=True)
        self._ex = submitit.SlurmExecutor(folder=opts.folder, max_num_timeout=0)
        params: dict[str, Any] = {"job_name": opts.job_name, "time": opts.time_min,
                                  "cpus_per_task": opts.cpus_per_task, "signal_delay_s": 5}
        if opts.partition:
            params["partition"] = opts.partition
        if opts.parallelism:
            params["array_parallelism"] = opts.parallelism
        self._ex.update_parameters(**params)
        self._failed = False
        self.job_ids: list[str] = []
        """Every array task submitted so far ("123_4"): for tests and logs."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if not items:
            return []
        from submitit.core.utils import FailedJobError, FailedSubmissionError

        try:
            # submitit prints sbatch's stderr as well as raising it: one line is enough.
            with contextlib.redirect_stderr(io.StringIO()):
                jobs = self._ex.map_array(fn, list(items))
        except (FailedJobError, FailedSubmissionError) as exc:
            self._failed = True
            raise ExecutorError(f"slurm: sbatch refused the jobs: {_one_line(str(exc))}"
                                ) from None
        ids = [str(j.job_id) for j in jobs]
        self.job_ids.extend(ids)
        try:
            self._wait(jobs, ids)
            out: list[R] = []
            for job, jid in zip(jobs, ids, strict=True):
                try:
                    out.append(job.result())
                except Exception as exc:  # noqa: BLE001 (a task's own error, re-raised as a line)
                    raise ExecutorError(f"slurm: job {jid} failed: {_task_error(str(exc))} "
                                        f"(logs: {self.opts.folder})") from None
            return out
        except BaseException:
            self._failed = True
            subprocess.run(["scancel", *sorted({i.split('_')[0] for i in ids})],
                           capture_output=True)
            raise

    def _wait(self, jobs: Sequence[Any], ids: Sequence[str]) -> None:
        waiting = dict(zip(ids, jobs, strict=True))
        ended_at: dict[str, float] = {}
        arrays = sorted({i.split("_")[0] for i in ids})
        while waiting:
            for jid in [j for j, job in waiting.items() if job.paths.result_pickle.exists()]:
                del waiting[jid]
            if not waiting:
                return
            proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays),
                                   "-o", "%i|%T"], capture_output=True, text=True)
            # squeue answers "Invalid job id" once every task left the queue.
            listed = proc.returncode == 0 or "invalid job id" in proc.stderr.lower()
            states = parse_squeue_states(proc.stdout) if proc.returncode == 0 else {}
            now = time.monotonic()
            for jid in waiting:
                st = states.get(jid)
                # Gone from the queue (finished long ago) counts as ended; unknown while
                # squeue itself failed does not.
                if (st is not None and st.is_finished) or (listed and st is None):
                    ended_at.setdefault(jid, now)
                if now - ended_at.get(jid, now) > self.opts.grace_s:
                    what = st.value if st is not None else "left the queue"
                    raise ExecutorError(f"slurm: job {jid} ended ({what}) without a result "
                                        f"(logs: {self.opts.folder})")
            time.sleep(self.opts.poll_s)

    def close(self) -> None:
        if self._created and not self._failed and not self.opts.keep:
            shutil.rmtree(self.opts.folder, ignore_errors=True)


_SLURM_FLAGS = ("slurm_partition", "slurm_folder", "slurm_job_name", "slurm_time_min",
                "slurm_keep")


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The --executor and --slurm-* options of `train` and `evaluate` (read them back with
    `runner_from_cli`)."""
    opts = [
        click.option("--executor", type=click.Choice([k.value for k in ExecutorKind]),
                     default=ExecutorKind.LOCAL.value, show_default=True,
                     help="Where runs execute: local processes (--workers), or Slurm jobs "
                          "(one job array per batch, through submitit)."),
        click.option("--slurm-partition", help="Partition for --executor slurm (default: the "
                                               "cluster's default partition)."),
        click.option("--slurm-folder", type=click.Path(file_okay=False, path_type=Path),
                     help="Pickles and job logs for --executor slurm; the compute nodes must "
                          "see it at the same path (default: next to the output)."),
        click.option("--slurm-job-name", help="Job name of the Slurm jobs."),
        click.option("--slurm-time-min", type=click.IntRange(min=1), default=60,
                     show_default=True, help="Time limit of each Slurm job (minutes)."),
        click.option("--slurm-keep", is_flag=True,
                     help="Keep --slurm-folder after a successful run (it is kept on failure)."),
    ]
    return functools.reduce(lambda f, o: o(f), reversed(opts), fn)


def runner_from_cli(kw: dict[str, Any], *, workers: int, parallelism: int | None,
                    default_folder: Path, default_name: str) -> TaskRunner:
    """Pops the options `executor_options` added from `kw` and builds the runner; --slurm-*
    without --executor slurm is a usage error."""
    kind = ExecutorKind(kw.pop("executor"))
    given = {k: kw.pop(k) for k in _SLURM_FLAGS}
    if kind is ExecutorKind.LOCAL:
        extra = [f"--{k.replace('_', '-')}" for k in ("slurm_partition", "slurm_folder",
                                                      "slurm_job_name") if given[k]]
        if given["slurm_keep"]:
            extra.append("--slurm-keep")
        if extra:
            raise click.UsageError(f"{', '.join(extra)} needs --executor slurm")
        return LocalRunner(workers)
    opts = SlurmOptions(folder=given["slurm_folder"] or default_folder,
                        partition=given["slurm_partition"],
                        job_name=given["slurm_job_name"] or default_name,
                        time_min=given["slurm_time_min"], parallelism=parallelism,
                        keep=given["slurm_keep"])
    try:
        return SlurmRunner(opts)
    except ExecutorError as exc:
        raise click.ClickException(str(exc)) from None
