"""The config loader on arbitrary bytes: a file that is not a valid configuration is
one ConfigError naming the problem, never another exception, and never a partial config."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_rl.config import Config, ConfigError, load_config, parse_config

KEYS = ["[database]", "[daemon]", "[trust]", "[agent]", "path", "interval_s", "policy",
        "retention_days", "prune_batch", "critical_users", "deadline_horizon_s", "scope",
        "partitions", "actuation", "=", "\n", "\"", "'", "[", "]", ",", "{", "}", "1e999",
        "nan", "inf", "-5", "0", "true", "\u0663", "\x00", "\udcff", "  ", "#"]


def _load_bytes(data: bytes) -> Config | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_bytes(data)
        try:
            return load_config(path)
        except ConfigError as exc:
            text = str(exc)
            assert text and "\n" not in text.strip() and len(text) < 2000, text
            return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_a_config_or_one_config_error(data: bytes) -> None:
    _load_bytes(data)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(KEYS), max_size=40).map("".join))
def test_toml_like_text_is_a_config_or_one_config_error(text: str) -> None:
    try:
        cfg = parse_config(text.encode("utf-8", "replace").decode("utf-8"))
    except ConfigError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    assert cfg.daemon.interval_s > 0 and cfg.database.retention_days > 0


@pytest.mark.parametrize("data", [
    b"\xff\xfe[daemon]\n", b"[daemon]\ninterval_s = nan\n", b"[daemon]\ninterval_s = inf\n",
    b"[daemon]\ninterval_s = -inf\n", b"[database]\nretention_days = nan\n",
    b"[database]\nprune_batch = 0\n", b"[trust]\ndeadline_horizon_s = 1e300\n",
    b"[trust]\ncritical_users = [1]\n", b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    b"[daemon]\npolicy = \"\"\n", b"\x00" * 100, b"[" * 100000,
])
def test_hostile_config_files_are_refused_in_one_line(data: bytes) -> None:
    assert _load_bytes(data) is None
