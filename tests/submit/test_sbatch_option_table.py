"""rlsbatch's copy of sbatch's option table agrees with the installed sbatch's getopt.

Each option is tried as `--name` and `--name=x` (and each letter as `-L` and `-Lx`) with
--test-only and an empty script on stdin, so nothing is ever submitted: getopt's answer tells
whether it takes a value. Two-letter prefixes then list every long option sbatch knows (getopt
names them all when a prefix is ambiguous), so a new option in a Slurm upgrade shows up here.
"""

from __future__ import annotations

import re
import string
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from slurm_rl.submit.sbatch_options import LONG, NO_ARG, OPTIONAL, REQUIRED, SHORT

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _sbatch(*words: str) -> str:
    proc = subprocess.run(["sbatch", "--test-only", "-J", "rlsbatch-probe", *words],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
                          timeout=30)
    return proc.stdout + proc.stderr


def _kind_of_long(name: str) -> int:
    if name in ("help", "usage", "version"):
        return NO_ARG if "doesn't allow an argument" in _sbatch(f"--{name}=x") else OPTIONAL
    if "requires an argument" in _sbatch(f"--{name}"):
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


def test_every_long_option_takes_a_value_as_the_table_says() -> None:
    names = sorted(LONG)
    with ThreadPoolExecutor(8) as pool:
        kinds = dict(zip(names, pool.map(_kind_of_long, names), strict=True))
    assert kinds == LONG


def test_every_short_option_maps_as_the_table_says() -> None:
    letters = string.ascii_letters + string.digits
    with ThreadPoolExecutor(8) as pool:
        kinds = dict(zip(letters, pool.map(_kind_of_short, letters), strict=True))
    assert {k: v for k, v in kinds.items() if v is not None} == {
        k: LONG[v] for k, v in SHORT.items()}


def test_sbatch_knows_no_long_option_missing_from_the_table() -> None:
    prefixes = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase + "-"]
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda p: _sbatch(f"--{p}"), prefixes))
    seen: set[str] = set()
    for prefix, out in zip(prefixes, outputs, strict=True):
        seen.update(re.findall(r"'--([a-z0-9-]+)'", out))
        seen.discard(prefix)
    assert seen - set(LONG) == set()
