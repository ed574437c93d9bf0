"""`slurm-rl explain JOBID`: why a job is where it is, from the daemon's database."""

from __future__ import annotations

import time
from pathlib import Path

import click

from slurm_rl.config import ClaimsConfig, ConfigError, load_config
from slurm_rl.slurm.framing import one_line


@click.command("explain")
@click.argument("job_id")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="SLURM_RL_DB",
              help="The daemon's database (default: $SLURM_RL_DB, else [database] path).")
def explain(job_id: str, config_file: Path | None, db_path: Path | None) -> None:
    """Why JOB_ID is where it is: the latest decision for it and every action taken."""
    from slurm_rl.daemon.store import explain_job
    from slurm_rl.db.engine import make_engine, make_session_factory
    from slurm_rl.db.kinds import EntryKind

    try:
        path = db_path or load_config(config_file).database.path
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    from slurm_rl.db.guard import DatabaseError, FileKind, describe_error, inspect_file

    try:
        status = inspect_file(path, write=False)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from None
    if status.kind is not FileKind.OURS:
        raise click.ClickException(f"no database at {path}")
    try:
        rules = load_config(config_file).claims
    except ConfigError:
        rules = ClaimsConfig()  # the database was named; a broken config is not needed here
    from slurm_rl.daemon.claims import describe_record, stored_record

    engine = make_engine(path)
    try:
        with make_session_factory(engine)() as session:
            info = explain_job(session, job_id)
            claims = (describe_record(info.job.user, stored_record(session, info.job.user,
                                                                   rules), rules)
                      if info.job is not None else None)
    except Exception as exc:
        raise click.ClickException(describe_error(path, exc)) from None
    finally:
        engine.dispose()
    if info.job is None and info.entry is None and not info.actions:
        raise click.ClickException(f"job {job_id}: not in {path} (never seen by the daemon)")
    if info.job is not None:
        j = info.job
        deadline = f", deadline {_ts(j.deadline)}{' (hard)' if j.hard else ''}" \
            if j.deadline else ""
        scope = "managed" if j.managed else "not managed (outside the daemon's scope)"
        now = slurm_gpus_now(j.job_id)
        gpus = (f"{j.gpus} GPUs on {j.nodes} node(s)" if now is None
                else f"{now[0]} GPUs on {now[1]} node(s) now in Slurm"
                + (f" ({j.gpus} when the daemon last stored it)" if now[0] != j.gpus else ""))
        click.echo(f"job {j.job_id} ({one_line(j.name, 100)}, {one_line(j.user, 40)}): "
                   f"{j.state.value}, {gpus}, "
                   f"{scope}{deadline}")
        if claims is not None:
            click.echo(claims)
    if info.entry is None:
        click.echo("decision: none recorded")
    else:
        e = info.entry
        gpus = f", {e.gpus} GPUs" if e.gpus is not None else ""
        dry = " [dry run]" if e.dry_run else ""
        if e.kind is EntryKind.ORDER:
            what = f"rank {e.rank}{gpus}"
        elif e.kind is EntryKind.RESIZE:  # applied by daemon/resize.py when allowed: actions
            what = f"resize{gpus} (applied when it pays and is allowed: see the actions)"
        else:  # applied by daemon/preempt.py to jobs that opted in: actions
            what = (f"{e.kind.value}{gpus} (applied to a job that opted in to restarts "
                    "(--rl-elastic) when allowed: see the actions)")
        click.echo(f"decision at {_ts(e.at)} by {e.policy}{dry} (cycle {e.cycle_id}): "
                   f"{what}\n  reason: {e.reason}")
        if e.guard:
            click.echo(f"  guard: {e.guard}")
    if not info.actions:
        click.echo("actions: none")
    for a in info.actions:
        code = "" if a.exit_code is None else f" exit {a.exit_code}"
        click.echo(f"action {a.id} {_ts(a.started_at)} {a.status.value}{code}: {a.command}")
        for line in a.output.splitlines()[:5]:
            click.echo(f"    {line}")
    for ev in info.events:
        click.echo(f"event {_ts(ev.at)} {ev.kind.value}: {ev.old or '-'} -> {ev.new or '-'}")


def slurm_gpus_now(job_id: str) -> tuple[int, int] | None:
    """(GPUs in all, nodes) Slurm holds for the job now; None if Slurm can not tell (the job
    is gone, Slurm is down or not configured): the stored count is shown then."""
    from slurm_rl.slurm.conf import slurm_conf_problem
    from slurm_rl.slurm.parse import JOB_ID_RE, ParseError, parse_count, parse_gpu_count
    from slurm_rl.slurm.runner import SubprocessRunner

    if not JOB_ID_RE.fullmatch(job_id) or slurm_conf_problem() is not None:
        return None
    result = SubprocessRunner(timeout_s=10.0).run(
        ["squeue", "-h", "-j", job_id, "-O", "tres-per-node:400,tres-per-job:400,NumNodes:12"])
    fields = result.stdout.split()
    if result.returncode != 0 or len(fields) != 3:
        return None
    try:
        nodes = parse_count(fields[2], "NumNodes")
        per_job = parse_gpu_count(fields[1])
        return (per_job or parse_gpu_count(fields[0]) * nodes), nodes
    except ParseError:
        return None


def _ts(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
