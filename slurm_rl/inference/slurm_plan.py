"""`slurm-rl plan MODEL`: run inside a Slurm job, place MODEL's layers over the nodes Slurm gave
the job (SLURM_JOB_NODELIST, expanded by `scontrol show hostnames`) with the trained agent, and
print the plan (docs/inference.md, "On Slurm"). Without MODEL, the model is the one the job
was submitted with (`rlsbatch --rl-inference MODEL`: the `i=` field of the intent in the
job's comment, read for the job SLURM_JOB_ID names). Each node is one device of `--device-type`
(a preset), linked at `--bandwidth-gbps`, or described by a `--cluster` file naming the same
number of devices in node order; the first node (the batch host) receives the input.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import click

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.cli import NO_GUARD_HELP, place_or_fail
from slurm_rl.inference.profile import ProfileError, resolve


def job_nodes(nodelist: str) -> tuple[str, ...]:
    """The job's node names in Slurm's order."""
    from slurm_rl.slurm.hostlist import HostlistError, expand

    try:
        names = expand(nodelist, cl.MAX_DEVICES)
    except HostlistError as exc:
        raise click.ClickException(f"the job's node list {nodelist!r}: {exc}") from None
    if not names:
        raise click.ClickException(f"the job's node list {nodelist!r} names no node")
    return names


def job_comment(job_id: str) -> str:
    """The job's comment as Slurm holds it."""
    from slurm_rl.progress import ProgressError, read_job_comment
    from slurm_rl.slurm.runner import SubprocessRunner

    try:
        return read_job_comment(SubprocessRunner(), job_id)
    except ProgressError as exc:
        raise click.ClickException(f"{exc}; give MODEL") from None


def intent_model(job_id: str | None) -> str:
    """The inference model in this job's intent; a usage error (exit 2) when there is none."""
    from slurm_rl.submit.intent import decode_comment
    from slurm_rl.submit.tags import INFERENCE_MODELS

    if not job_id or not (job_id.isascii() and job_id.isdigit()):
        raise click.UsageError("no MODEL given and not inside a Slurm job (SLURM_JOB_ID is "
                               "unset): give MODEL, or submit with rlsbatch --rl-inference")
    intent = decode_comment(job_comment(job_id)).intent
    if intent is None or intent.inference is None:
        raise click.UsageError(f"no MODEL given and job {job_id} was not submitted with "
                               "rlsbatch --rl-inference MODEL: give MODEL")
    if intent.inference not in INFERENCE_MODELS:
        # from a raw --comment: only a shipped name, never a path to open
        raise click.UsageError(f"job {job_id}'s intent names {intent.inference!r}, not a "
                               f"shipped model ({', '.join(INFERENCE_MODELS)}): give MODEL")
    return intent.inference


@click.command("plan")
@click.argument("model", required=False)
@click.option("--nodes", default=None, help="A Slurm node list instead of SLURM_JOB_NODELIST "
                                            "(outside a job).")
@click.option("--device-type", type=click.Choice(sorted(cl.PRESETS)), default="cpu",
              show_default=True, help="Every node is one device of this preset.")
@click.option("--bandwidth-gbps", type=click.FloatRange(min=1e-6, max=1e6), default=10.0,
              show_default=True)
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Devices and bandwidth from a file (one device per node, "
                                 "in node order) instead of --device-type/--bandwidth-gbps.")
@click.option("--scheduler", type=click.Choice(["drm-dql", "heft", "whole", "request-plan"]),
              default="drm-dql", show_default=True)
@click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--no-guard", is_flag=True, help=NO_GUARD_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
def plan_command(model: str | None, nodes: str | None, device_type: str, bandwidth_gbps: float,
                 cluster_file: Path | None, scheduler: str, checkpoint: Path | None,
                 no_guard: bool, as_json: bool) -> None:
    """Place MODEL (a shipped structure or a profile file; default: the job's own
    `rlsbatch --rl-inference` model) over this job's nodes."""
    from slurm_rl.inference import plan

    nodelist = nodes or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise click.UsageError("not inside a Slurm job (SLURM_JOB_NODELIST is unset); "
                               "give --nodes")
    if model is None:
        model = intent_model(os.environ.get("SLURM_JOB_ID"))
    names = job_nodes(nodelist)
    try:
        prof = resolve(model)
    except ProfileError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL") from None
    if cluster_file is not None:
        try:
            base = cl.load(cluster_file)
        except cl.ClusterError as exc:
            raise click.BadParameter(str(exc), param_hint="--cluster") from None
        if base.n != len(names):
            raise click.BadParameter(f"{cluster_file}: {base.n} devices, the job has "
                                     f"{len(names)} nodes", param_hint="--cluster")
    else:
        base = cl.make([device_type] * len(names), bandwidth_gbps)
    devices = tuple(replace(d, name=n) for d, n in zip(base.devices, names, strict=True))
    c = replace(base, devices=devices)
    p = place_or_fail(prof, c, scheduler, checkpoint, guard=not no_guard)
    if as_json:
        click.echo(json.dumps({"model": p.model, "scheduler": p.scheduler,
                               "predicted_latency_s": p.latency_s,
                               "guard": p.guard or None,
                               "link_latency_s": c.link_latency_s, "nodes": list(names),
                               "stages": [{"node": d, "first": a, "last": b,
                                           "start_s": t0, "done_s": t1}
                                          for (d, a, b), (t0, t1)
                                          in zip(p.stages, plan.stage_times(p), strict=True)]}))
    else:
        click.echo(plan.format_plan(p))
