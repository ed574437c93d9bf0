"""Run `slurm-rl ARGS...` as the user `nobody` (uid/gid 65534), for the "any user" tests.

The interpreter of this venv lives under /root (mode 0700), so `runuser -u nobody` can not even
start it. Instead this script runs the command once as root with its output discarded (every
lazy import is then loaded), drops all privileges for good (setresuid), and runs it again: the
second run opens the database as nobody, which is what the test is about.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from slurm_rl.cli import main

NOBODY = 65534

if __name__ == "__main__":
    args = sys.argv[1:]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(BaseException):
            main(args, standalone_mode=False)
        with contextlib.suppress(BaseException):
            main([a for a in args if a != "--json"], standalone_mode=False)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    main(args)
