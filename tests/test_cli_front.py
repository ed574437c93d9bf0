"""`slurm-rl --help` lists every command without importing any of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest

from slurm_rl import cli

HEAVY = ("numpy", "torch", "sqlalchemy", "slurm_rl.policies", "slurm_rl.sim", "slurm_rl.daemon")


@pytest.mark.parametrize("name", sorted(cli._COMMANDS))
def test_each_help_line_is_the_commands_own(name: str) -> None:
    target, line = cli._COMMANDS[name]
    module_name, attr = target.split(":")
    try:
        command: click.Command = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{exc.name} is not installed")
    assert line == command.get_short_help_str(limit=1000)


def test_top_level_help_imports_no_command() -> None:
    code = ("import sys\nfrom slurm_rl.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in sys.modules if m.startswith({HEAVY!r})))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "LOADED []" in proc.stdout, proc.stdout
    for name in cli._COMMANDS:
        assert f"  {name} " in proc.stdout



@pytest.mark.parametrize("name", sorted(cli._COMMANDS))
def test_no_commands_help_loads_torch(name: str) -> None:
    """Each command's own --help (train's included: its trainer is imported only to run)."""
    code = ("import sys\nfrom slurm_rl.cli import main\n"
            f"try:\n    main([{name!r}, '--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "TORCH False" in proc.stdout, proc.stdout + proc.stderr

def test_torch_hint_installs_what_the_makefile_installs() -> None:
    makefile = (cli.__file__.rsplit("/", 2)[0] + "/Makefile")
    text = open(makefile).read()
    pin = text.split("TORCH_PIN ?= ", 1)[1].split()[0]
    index = text.split("TORCH_INDEX ?= ", 1)[1].split()[0]
    assert f"'{pin}'" in cli.TORCH_INSTALL and f"--extra-index-url {index} " in cli.TORCH_INSTALL
