"""tests/install reuse the daemon tests' cluster helpers (tests/daemon/cluster_jobs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

_DAEMON_TESTS = str(Path(__file__).resolve().parents[1] / "daemon")
if _DAEMON_TESTS not in sys.path:
    sys.path.append(_DAEMON_TESTS)
