"""`slurm-rl`: the admin and research command. Subcommands load lazily (see `_COMMANDS`)."""

from __future__ import annotations

import importlib

import click

# name -> ("module:attribute" of a click command, its one-line help). The module is imported
# only when that command runs, so `slurm-rl --help` stays fast; a test keeps each line equal to
# the command's own short help.
_COMMANDS: dict[str, tuple[str, str]] = {
    "admin": ("slurm_rl.trust_lua:admin",
           "Files slurm-rl hands to Slurm (site administration)."),
    "db": ("slurm_rl.db.cli:db",
           "Create, migrate and inspect slurm-rl's SQLite database."),
    "daemon": ("slurm_rl.daemon.cli:daemon",
           "Watch Slurm, decide the order and GPU counts of pending jobs, apply them."),
    "agent": ("slurm_rl.nvml_agent:agent",
           "Publish this node's GPU utilisation, memory, power and temperature (NVML) to "
           "Slurm."),
    "explain": ("slurm_rl.daemon.explain:explain",
           "Why JOB_ID is where it is: the latest decision for it and every action taken."),
    "status": ("slurm_rl.daemon.status:status",
           "The queue as the daemon sees it: rank, class, deadline slack, predicted start "
           "and finish, GPUs and the reason for each job."),
    "progress": ("slurm_rl.progress:progress_command",
           "Report STEPS done (of --total) in this job's comment, for the scheduler's "
           "predictions."),
    "simulate": ("slurm_rl.sim.cli:simulate",
           "Replay a trace through POLICY on a simulated Slurm GPU cluster (priority order +"
           " EASY backfill planned from time limits, as slurmctld schedules)."),
    "evaluate": ("slurm_rl.sim.evaluate:evaluate",
           "Run policies x traces x loads x seeds; write a Markdown table, JSON and plots."),
    "policies": ("slurm_rl.cli:policies_command",
           "List the registered scheduling policies."),
    "trace": ("slurm_rl.sim.trace_cli:trace",
           "Synthetic traces from seeded workload families (docs/simulator.md)."),
    "gittins-table": ("slurm_rl.sim.gittins_build:gittins_table",
           "The Gittins-index table of the `gittins` policy."),
    "train": ("slurm_rl.rl.cli:train_command",
           "Train the `rl` policy with PPO on the scenarios' TRAINING traces, or fine-tune "
           'it on what the daemon recorded (--from-db; docs/rl.md, "Update scheme on a live '
           'cluster").'),
    "inference": ("slurm_rl.inference.cli:inference",
           "Layer-aware DNN inference placement with DRM-DQL (docs/inference.md)."),
    "plan": ("slurm_rl.inference.slurm_plan:plan_command",
           "Place MODEL (a shipped structure or a profile file; default: the job's own "
           "`rlsbatch --rl-inference` model) over this job's nodes."),
    "replay": ("slurm_rl.replay:replay",
           "Replay the jobs the daemon recorded under another policy, next to what happened."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = _COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return None  # not built yet
            if (exc.name or "").split(".")[0] == "torch":
                return _needs_torch(cmd_name)  # still listed by --help, one line when run
            raise
        command: click.Command = getattr(module, attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's command list, from `_COMMANDS`' help lines: importing every command (numpy,
        the policies, torch) to print one line each would make `--help` take seconds."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            # A command not imported yet is shortened by click's own rule, from its help line.
            shown = self.commands.get(name) or click.Command(name, help=_COMMANDS[name][1])
            rows.append((name, shown.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except Exception as exc:  # torch is the optional [rl] extra (setup.cfg)
            cause: BaseException | None = exc
            while cause is not None and not (isinstance(cause, ModuleNotFoundError)
                                             and (cause.name or "").split(".")[0] == "torch"):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            raise click.ClickException(_torch_missing(ctx.invoked_subcommand)) from None


# The CPU build, as the Makefile installs it (TORCH_PIN, TORCH_INDEX): PyPI alone resolves this
# pin to the CUDA build, several GB of nvidia-* wheels.
TORCH_INSTALL = ("pip install --extra-index-url https://download.pytorch.org/whl/cpu "
                 "'torch==2.13.0+cpu'")


def _torch_missing(command: str | None) -> str:
    return (f"{command or 'this command'} needs torch, which is not installed; the CPU build "
            f"(about 750 MB): {TORCH_INSTALL}")


def _needs_torch(name: str) -> click.Command:
    def refuse(**_kwargs: object) -> None:
        raise click.ClickException(_torch_missing(name))

    return click.Command(name, callback=refuse, context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
                         help=f"(needs torch: {TORCH_INSTALL})")


@click.group(cls=LazyGroup)
@click.version_option(package_name="slurm-rl")
def main() -> None:
    """slurm-rl: RL and deadline-aware scheduling for Slurm GPU clusters."""


@click.command("policies")
def policies_command() -> None:
    """List the registered scheduling policies."""
    from slurm_rl import policies

    for name in policies.names():
        suffix = "  (oracle: reads true durations)" if name in policies.ORACLES else ""
        click.echo(f"{name}{suffix}")
