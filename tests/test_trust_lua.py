"""Rendering job_submit.lua from the [trust] grants (no Slurm needed; the plugin's behaviour in
slurmctld is tested in tests/slurm/test_job_submit_lua.py)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.config import TrustConfig, load_config
from slurm_rl.submit import tags
from slurm_rl.trust_lua import (
    MAX_MODEL_CHARS,
    RenderError,
    fill,
    horizon_text,
    lua_set,
    lua_string,
    render_job_submit_lua,
    template_text,
)

REPO = Path(__file__).resolve().parents[1]
CLUSTER_CONFIG = REPO / "docker" / "config"


def unlua(literal: str) -> bytes:
    """Decode the subset of Lua string literals `lua_string` writes (a test helper)."""
    assert literal[0] == literal[-1] == '"'
    body = literal[1:-1]
    assert '"' not in body.replace('\\"', "")
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "\\":
            out.append(int(body[i + 1:i + 4]))
            i += 4
        else:
            out.append(ord(body[i]))
            i += 1
    return bytes(out)


def test_test_cluster_runs_the_rendering_of_its_config() -> None:
    """docker/cluster copies docker/config/job_submit.lua (no Python there); it must be exactly
    what `slurm-rl admin job-submit-lua` makes of docker/config/slurm-rl-trust.toml."""
    config = load_config(CLUSTER_CONFIG / "slurm-rl-trust.toml")
    assert config.trust.critical_users == ("slurmrl-crit",)
    committed = (CLUSTER_CONFIG / "job_submit.lua").read_text()
    assert committed == render_job_submit_lua(config.trust), (
        "regenerate: .venv/bin/slurm-rl admin job-submit-lua --config "
        "docker/config/slurm-rl-trust.toml -o docker/config/job_submit.lua")
    conf = (CLUSTER_CONFIG / "slurm.conf.in").read_text()
    assert re.search(r"^JobSubmitPlugins=lua$", conf, re.M)


@pytest.mark.parametrize("text", [
    "alice", 'a"b', "a\\b", "new\nline", "caf\u00e9", "\u0663", "", "%s%d", "]]--", "\x00",
    "caf\udce9", "a\x1fb",
])
def test_lua_string_round_trips_and_stays_printable(text: str) -> None:
    literal = lua_string(text)
    assert unlua(literal) == text.encode("utf-8", "surrogateescape")
    assert all(0x20 <= ord(ch) < 0x7F for ch in literal)
    assert "\n" not in literal


def test_lua_set_is_sorted_and_typed() -> None:
    assert lua_set([]) == "{}"
    assert lua_set(["b", "a", "a"]) == '{["a"] = true, ["b"] = true}'
    assert lua_set([64030, 0]) == "{[0] = true, [64030] = true}"


def test_render_bakes_in_grants_bounds_and_operators() -> None:
    trust = TrustConfig(critical_users=("ann", 'x"y'), critical_accounts=("gpu-crit",),
                        critical_qos=("urgent",), deadline_horizon_s=7 * 86400.0)
    text = render_job_submit_lua(trust, operator_uids=[64030])
    assert not re.search(r"@[A-Z_]+@", text)
    assert 'local CRITICAL_USERS = {["ann"] = true, ["x\\034y"] = true}' in text
    assert 'local CRITICAL_ACCOUNTS = {["gpu-crit"] = true}' in text
    assert 'local CRITICAL_QOS = {["urgent"] = true}' in text
    assert "local OPERATOR_UIDS = {[0] = true, [64030] = true}" in text
    assert "local DEADLINE_HORIZON_S = 604800\n" in text
    assert 'local DEADLINE_HORIZON_TEXT = "7 days"' in text
    for name in ("MAX_INT", "MAX_DIGITS", "MAX_GPUS", "MIN_EPOCH", "MAX_EPOCH",
                 "MAX_PART_BYTES", "MAX_COMMENT_BYTES"):
        assert f"local {name} = {getattr(tags, name)}\n" in text
    assert 'local CLASSES = {["besteffort"] = true, ["critical"] = true, ["standard"] = true}' \
        in text
    assert "function slurm_job_submit(job_desc, part_list, submit_uid)" in text
    assert "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)" in text


def test_defaults_grant_nothing_and_trust_only_root() -> None:
    text = render_job_submit_lua(TrustConfig())
    assert "local CRITICAL_USERS = {}\n" in text and "local CRITICAL_QOS = {}\n" in text
    assert "local OPERATOR_UIDS = {[0] = true}\n" in text
    assert 'local DEADLINE_HORIZON_TEXT = "90 days"' in text


def test_model_name_bound_matches_the_codec() -> None:
    assert tags.valid_model_name("m" * MAX_MODEL_CHARS)
    assert not tags.valid_model_name("m" * (MAX_MODEL_CHARS + 1))


@pytest.mark.parametrize(("trust", "uids", "message"), [
    (TrustConfig(critical_users=("",)), (), "trust.critical_users: '' is not a name"),
    (TrustConfig(critical_accounts=(" a",)), (), "trust.critical_accounts: ' a' is not a name"),
    (TrustConfig(), (-1,), "--operator: -1 is not a uid"),
    (TrustConfig(), (2**32 - 1,), "--operator: 4294967295 is not a uid"),
    (TrustConfig(deadline_horizon_s=0.5), (), "trust.deadline_horizon_s: must be >= 1 s"),
])
def test_render_refuses_what_it_can_not_express(trust: TrustConfig, uids: tuple[int, ...],
                                                message: str) -> None:
    with pytest.raises(RenderError, match=re.escape(message)):
        render_job_submit_lua(trust, operator_uids=uids)


@pytest.mark.parametrize(("seconds", "text"), [
    (86400, "1 day"), (7776000, "90 days"), (7200, "2 hours"), (60, "1 minute"), (61, "61 seconds"),
])
def test_horizon_text(seconds: int, text: str) -> None:
    assert horizon_text(seconds) == text


def test_fill_is_strict_about_placeholders() -> None:
    assert fill("a @X@ b @X@", {"X": "1"}) == "a 1 b 1"
    with pytest.raises(KeyError, match="no value for @Y@"):
        fill("@Y@", {})
    with pytest.raises(KeyError, match="no placeholder for Z"):
        fill("plain", {"Z": "1"})
    assert set(re.findall(r"@([A-Z_]+)@", template_text())) >= {"CRITICAL_USERS", "MAX_INT"}


def test_command_prints_and_writes(tmp_path: Path) -> None:
    config = tmp_path / "site.toml"
    config.write_text('[trust]\ncritical_users = ["ann"]\ndeadline_horizon_s = 3600\n')
    runner = CliRunner()
    printed = runner.invoke(main, ["admin", "job-submit-lua", "--config", str(config),
                                   "--operator", "0", "--operator", "root"])
    assert printed.exit_code == 0, printed.output
    assert printed.output == render_job_submit_lua(load_config(config).trust)
    out = tmp_path / "etc" / "job_submit.lua"
    out.parent.mkdir()
    wrote = runner.invoke(main, ["admin", "job-submit-lua", "--config", str(config),
                                 "-o", str(out)])
    assert wrote.exit_code == 0, wrote.output
    assert out.read_text() == printed.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert os.listdir(out.parent) == ["job_submit.lua"]


@pytest.mark.parametrize(("args", "content", "message"), [
    (["--operator", "no-such-user-slurmrl"], "", "Error: --operator: no user "
     "'no-such-user-slurmrl' on this host"),
    ([], "[trust]\ncritical_users = \"ann\"\n", "trust.critical_users: expected an array of "
     "strings"),
    ([], "[trust]\nbogus = 1\n", "unknown key 'bogus' in [trust]"),
    (["-o", "/nonexistent-dir/job_submit.lua"], "", "Error: /nonexistent-dir/job_submit.lua: "
     "can not write (No such file or directory)"),
])
def test_command_errors_are_one_line(tmp_path: Path, args: list[str], content: str,
                                     message: str) -> None:
    config = tmp_path / "site.toml"
    config.write_text(content)
    result = CliRunner().invoke(main, ["admin", "job-submit-lua", "--config", str(config), *args])
    assert result.exit_code == 1
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
