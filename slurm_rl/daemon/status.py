"""`slurm-rl status`: the queue as the daemon last saw it, from its database, for any user.

One row per pending job in the daemon's order (its latest recorded rank, GPU count and reason),
then the running jobs; each with its class, deadline slack (deadline minus predicted finish),
and a predicted start and finish (forecast.py). The database is opened read-only
(db/readonly.py): no write access is needed, and a file the user may not read is one line.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from slurm_rl.core import JobState
from slurm_rl.daemon.forecast import Running, Waiting, forecast
from slurm_rl.daemon.store import guard_note
from slurm_rl.db.kinds import EntryKind
from slurm_rl.db.models import DecisionEntry, DecisionRow, Job, JobProgress, Node
from slurm_rl.db.readonly import ReadOnlyError, database_path, read_only_session
from slurm_rl.slurm.framing import one_line

FORECAST_MAX = 2000
"""Jobs forecast at most (the plan is quadratic); later ranks show no prediction."""


@dataclass(frozen=True, kw_only=True)
class StatusRow:
    job_id: str
    user: str
    name: str
    state: str
    managed: bool
    rank: int | None
    service_class: str | None
    deadline: float | None
    slack_s: float | None
    """deadline - predicted finish (negative: predicted late); None without both."""
    predicted_start: float | None
    predicted_finish: float | None
    gpus: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class QueueStatus:
    database: str
    as_of: float | None
    """When the daemon's last decision was made (None: it has made none)."""
    policy: str | None
    dry_run: bool | None
    gpus_total: int
    rows: tuple[StatusRow, ...]
    guard: str = ""
    """The last decision's note from the policy's guard ("" when it had none)."""


def _profiled_run_s(job: Job, gpus: int) -> float | None:
    """The whole run at `gpus`, from the steps the job stated and its model's measured
    throughput (the daemon's PROFILE estimate); None for a job that stated neither."""
    from slurm_rl import perfmodel

    model = (job.model or "").lower()
    if not job.total_steps or model not in perfmodel.curves():
        return None
    rate = perfmodel.curve_for(model, job.batch_size).throughput(max(gpus, 1))
    return job.total_steps / rate if rate > 0 else None


def _run_s(job: Job, gpus: int) -> float | None:
    """A pending job's predicted run time: its profile, capped by its time limit (slurmctld
    ends it there), else the limit; None with neither."""
    ends = [t for t in (_profiled_run_s(job, gpus), job.time_limit_s) if t is not None]
    return min(ends) if ends else None


def _expected_end(job: Job, progress: JobProgress | None) -> float | None:
    """When a running job ends: the soonest of its time limit, its profile and its reported
    rate (each counted from the start, the rate from its report)."""
    ends = []
    if job.start_time is not None:
        ends += [job.start_time + t for t in (job.time_limit_s, _profiled_run_s(job, job.gpus))
                 if t is not None]
    if progress is not None and progress.rate and progress.steps_total is not None:
        since = progress.reported_at or progress.recorded_at
        left = max(0, progress.steps_total - progress.steps_done)
        ends.append(since + left / progress.rate)
    return min(ends) if ends else None


def read_status(session: Session, database: str, *, now: float | None = None) -> QueueStatus:
    last = session.execute(select(DecisionRow).order_by(DecisionRow.id.desc()).limit(1)
                           ).scalar_one_or_none()
    pending_states = [s for s in JobState if s.is_pending]
    running_states = [s for s in JobState if s.is_running]
    live = list(session.execute(select(Job).where(
        Job.state.in_(pending_states + running_states))).scalars())
    by_id = {j.job_id: j for j in live}
    latest = (select(DecisionEntry.job_id, func.max(DecisionEntry.id).label("eid"))
              .where(DecisionEntry.kind == EntryKind.ORDER)
              .group_by(DecisionEntry.job_id).subquery())
    entries = {e.job_id: e for e in session.execute(
        select(DecisionEntry).join(latest, DecisionEntry.id == latest.c.eid)).scalars()
        if e.job_id in by_id}
    progress = {p.job_id: p for p in session.execute(select(JobProgress)).scalars()
                if p.job_id in by_id}
    gpus_total = int(session.execute(select(func.coalesce(func.sum(Node.gpus_total), 0))
                                     ).scalar_one())
    now = time.time() if now is None else now
    pending = [j for j in live if j.state.is_pending]
    # The daemon's order; jobs it has not ranked (unmanaged, or new) after, in submit order.
    pending.sort(key=lambda j: (entries[j.job_id].rank if j.job_id in entries
                                and entries[j.job_id].rank is not None else math.inf,
                                j.submit_time, j.job_id))
    running = sorted((j for j in live if j.state.is_running),
                     key=lambda j: (j.start_time or 0.0, j.job_id))

    def gpus_of(j: Job) -> int:
        e = entries.get(j.job_id)
        return e.gpus if e is not None and e.gpus is not None else j.gpus

    plan = forecast(
        now, gpus_total,
        [Running(job_id=j.job_id, gpus=j.gpus, end=_expected_end(j, progress.get(j.job_id)))
         for j in running],
        [Waiting(job_id=j.job_id, gpus=gpus_of(j), duration_s=_run_s(j, gpus_of(j)))
         for j in pending[:FORECAST_MAX]])
    rows = []
    for j in [*pending, *running]:
        e = entries.get(j.job_id)
        f = plan.get(j.job_id)
        start = j.start_time if j.state.is_running else (f.start if f else None)
        finish = f.finish if f else None
        slack = j.deadline - finish if j.deadline is not None and finish is not None else None
        rows.append(StatusRow(
            job_id=j.job_id, user=j.user, name=j.name, state=j.state.value, managed=j.managed,
            rank=e.rank if e is not None and j.state.is_pending else None,
            service_class=j.service_class.value if j.service_class else None,
            deadline=j.deadline, slack_s=slack, predicted_start=start,
            predicted_finish=finish, gpus=gpus_of(j) if j.state.is_pending else j.gpus,
            reason=(e.reason if e is not None and j.state.is_pending else
                    "" if j.state.is_pending else "running")))
    return QueueStatus(database=database, as_of=last.at if last else None,
                       policy=last.policy if last else None,
                       dry_run=last.dry_run if last else None, gpus_total=gpus_total,
                       guard=guard_note(last.notes) if last else "",
                       rows=tuple(rows))


def _clock(t: float | None, now: float | None = None) -> str:
    """Month, day and time; with the year when it is not this year's."""
    if t is None:
        return "-"
    when = time.localtime(t)
    this_year = time.localtime(time.time() if now is None else now).tm_year
    return time.strftime("%m-%d %H:%M" if when.tm_year == this_year else "%Y-%m-%d %H:%M", when)


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 3600:
        return f"{sign}{s / 60:.0f}m"
    if s < 86400:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def print_table(status: QueueStatus, *, user: str | None, limit: int | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    def text(value: str, limit: int) -> str:
        """A user's string as a cell: one line, cut, and never read as rich markup (a job named
        `x[/]` would stop the table for everyone; `[white on white]` would hide a row)."""
        return escape(one_line(value, limit))

    rows = [r for r in status.rows if user is None or r.user == user]
    shown = rows if limit is None else rows[:limit]
    mode = " (dry run)" if status.dry_run else ""
    title = (f"slurm-rl queue as of {_clock(status.as_of)}, policy {status.policy}{mode}, "
             f"{status.gpus_total} GPUs" if status.as_of else "slurm-rl: no decision recorded")
    title = escape(title)
    if status.guard:
        title += f"\nguard: {text(status.guard, 300)}"
    console = Console(width=None if sys.stdout.isatty() else 160)
    if not rows:
        whose = f" of user {user}" if user is not None else ""
        console.print(f"{title}\nno pending or running jobs{escape(whose)}", highlight=False)
        return
    table = Table(title=title, title_justify="left")
    for col, justify in (("rank", "right"), ("job", "left"), ("user", "left"),
                         ("state", "left"), ("class", "left"), ("slack", "right"),
                         ("start", "left"), ("finish", "left"), ("GPUs", "right"),
                         ("reason", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in shown:
        slack = _span(r.slack_s)
        if r.slack_s is not None and r.slack_s < 0:
            slack = f"[red]{slack}[/red]"
        table.add_row("-" if r.rank is None else str(r.rank), text(f"{r.job_id} {r.name}", 40),
                      text(r.user, 40), r.state.lower(), text(r.service_class or "-", 20),
                      slack, _clock(r.predicted_start), _clock(r.predicted_finish),
                      str(r.gpus), text(r.reason or "-", 60),
                      style=None if r.managed else "dim")
    console.print(table)
    if len(shown) < len(rows):
        console.print(f"... {len(rows) - len(shown)} more (--all shows every job)")


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (times: epoch seconds).")
@click.option("--user", help="Only this user's jobs.")
@click.option("--all", "show_all", is_flag=True, help="Every job, not only the first 50.")
@click.option("--config", "config_file",
              type=click.Path(dir_okay=False, readable=False, path_type=Path))
@click.option("--db", "db_path", envvar="SLURM_RL_DB",
              help="The daemon's database (default: $SLURM_RL_DB, else [database] path).",
              type=click.Path(dir_okay=False, readable=False, path_type=Path))
def status(as_json: bool, user: str | None, show_all: bool, config_file: Path | None,
           db_path: Path | None) -> None:
    """The queue as the daemon sees it: rank, class, deadline slack, predicted start and
    finish, GPUs and the reason for each job. Reads the database only (any user)."""
    try:
        path = database_path(config_file, db_path)
        with read_only_session(path) as session:
            result = read_status(session, str(path))
    except ReadOnlyError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        data = asdict(result)
        data["rows"] = [r for r in data["rows"] if user is None or r["user"] == user]
        click.echo(json.dumps(data, indent=1))
    else:
        print_table(result, user=user, limit=None if show_all else 50)
