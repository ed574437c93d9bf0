"""rlsbatch's copy of sbatch's option table agrees with the installed sbatch's getopt.

Each option is tried as `--name` and `--name=x` (and each letter as `-L` and `-Lx`) with
--test-only and an empty script on stdin, so nothing is ever submitted: getopt's answer tells
whether it takes a value. Two-letter prefixes then list every long option sbatch knows (getopt
names them all when a prefix is ambiguous), so a new option in a Slurm upgrade shows up here;
`sbatch --help` and `--usage` name the rest.

The table checked is the one rlsbatch chooses for the installed sbatch's version
(submit/sbatch_options.py: 22.05's, or a newer release's own); every other release's options are
tried too, and must be refused or read as the abbreviation they are in this release.
`docker/test-matrix` runs these tests against each release's sbatch.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from slurm_rl.submit.sbatch_options import (
    LONG,
    NO_ARG,
    OPTIONAL,
    RELEASES,
    REQUIRED,
    SHORT,
    OptionError,
    installed_table,
    resolve_in,
    sbatch_version,
    table_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _sbatch(*words: str) -> str:
    try:
        proc = subprocess.run(["sbatch", "--test-only", "-J", "rlsbatch-probe", *words],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return ""  # 26.05's --external (no value) waits for an external launcher: accepted
    return proc.stdout + proc.stderr


def _kind_of_long(name: str) -> int | None:
    """getopt's reading of `--name`: None if refused (unrecognized or ambiguous)."""
    if name in ("help", "usage", "version"):
        return NO_ARG if "doesn't allow an argument" in _sbatch(f"--{name}=x") else OPTIONAL
    plain = _sbatch(f"--{name}")
    if "unrecognized option" in plain or "is ambiguous" in plain:
        return None
    if "requires an argument" in plain:
        return REQUIRED
    if "doesn't allow an argument" in _sbatch(f"--{name}=x"):
        return NO_ARG
    return OPTIONAL


def _kind_of_short(letter: str) -> int | None:
    plain = _sbatch(f"-{letter}")
    if "invalid option" in plain:
        return None
    if "option requires an argument" in plain:
        return REQUIRED
    if plain.startswith(("Usage:", "slurm-wlm")):
        return NO_ARG  # -h and -V print and exit at once, whatever follows them
    attached = _sbatch(f"-{letter}x")
    return NO_ARG if "option requires an argument -- 'x'" in attached else OPTIONAL


def _expected(name: str, table: dict[str, int]) -> int | None:
    try:
        return table[resolve_in(name, table)]
    except OptionError:
        return None


def test_every_long_option_takes_a_value_as_the_table_says() -> None:
    table = installed_table()
    names = sorted(set(LONG).union(*RELEASES.values()))
    with ThreadPoolExecutor(8) as pool:
        kinds = dict(zip(names, pool.map(_kind_of_long, names), strict=True))
    assert kinds == {name: _expected(name, table) for name in names}


def test_every_short_option_maps_as_the_table_says() -> None:
    table = installed_table()
    letters = string.ascii_letters + string.digits
    with ThreadPoolExecutor(8) as pool:
        kinds = dict(zip(letters, pool.map(_kind_of_short, letters), strict=True))
    assert {k: v for k, v in kinds.items() if v is not None} == {
        k: table[v] for k, v in SHORT.items()}


def test_sbatch_knows_no_long_option_missing_from_the_table() -> None:
    prefixes = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase + "-"]
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda p: _sbatch(f"--{p}"), prefixes))
    seen: set[str] = set()
    for prefix, out in zip(prefixes, outputs, strict=True):
        seen.update(re.findall(r"'--([a-z0-9-]+)'", out))
        seen.discard(prefix)
    listed = {name for flag in ("--help", "--usage")
              for name in re.findall(r"--([a-z][a-z0-9-]+)", _sbatch(flag))}
    # 24.11's and 26.05's help still list --power, which their getopt refuses
    seen.update(name for name in listed - seen if _kind_of_long(name) is not None)
    assert seen - set(installed_table()) == set()


def _reported_version() -> str:
    out = subprocess.run(["sbatch", "-V"], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return out.split()[-1]


def test_the_version_read_is_the_one_sbatch_reports() -> None:
    reported = _reported_version()
    assert sbatch_version() == reported
    assert installed_table() == table_for(reported)


def test_an_sbatch_outside_debians_path_is_asked_its_version(tmp_path: Path) -> None:
    """Not /usr/bin/sbatch (so no Debian changelog to read): `sbatch -V` is run."""
    sbatch = shutil.which("sbatch")
    assert sbatch is not None
    shutil.copy2(sbatch, tmp_path / "sbatch")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    assert sbatch_version(env) == _reported_version()
    assert sbatch_version({**env, "PATH": str(tmp_path / "nothing-here")}) is None
