"""`slurm-rl`: the admin and research command. Subcommands load lazily (see `_COMMANDS`)."""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command; imported only when that command runs.
_COMMANDS: dict[str, str] = {
    "admin": "slurm_rl.trust_lua:admin",
    "db": "slurm_rl.db.cli:db",
    "daemon": "slurm_rl.daemon.cli:daemon",
    "agent": "slurm_rl.nvml_agent:agent",
    "explain": "slurm_rl.daemon.explain:explain",
    "status": "slurm_rl.daemon.status:status",
    "progress": "slurm_rl.progress:progress_command",
    "simulate": "slurm_rl.sim.cli:simulate",
    "evaluate": "slurm_rl.sim.evaluate:evaluate",
    "policies": "slurm_rl.cli:policies_command",
    "gittins-table": "slurm_rl.sim.gittins_build:gittins_table",
    "train": "slurm_rl.rl.train:train_command",
    "inference": "slurm_rl.inference.cli:inference",
    "plan": "slurm_rl.inference.slurm_plan:plan_command",
    "replay": "slurm_rl.replay:replay",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
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


def _torch_missing(command: str | None) -> str:
    return (f"{command or 'this command'} needs torch, which is not installed: "
            "pip install 'slurm-rl[rl]' (the CPU build: see README.md)")


def _needs_torch(name: str) -> click.Command:
    def refuse(**_kwargs: object) -> None:
        raise click.ClickException(_torch_missing(name))

    return click.Command(name, callback=refuse, context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
                         help="(needs torch: pip install 'slurm-rl[rl]')")


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
