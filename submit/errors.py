"""The one error rlsbatch reports itself (sbatch's own errors reach the user from sbatch)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: rlsbatch prints `rlsbatch: error: <message>`, submits nothing and exits with
    `exit_code` (2, as click and argparse do for usage errors; 1 for a failed cluster query)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
