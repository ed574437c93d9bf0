"""A new user's mistakes: one line, the right exit code, nothing created.

Each test runs the installed command in a subprocess, as a person would, and checks that the
output holds no traceback, that the error is one line naming what is wrong, the exit status
(2 for a usage error), and that no file or folder appeared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCENARIOS = """
[evaluate]
out = "out"
policies = ["fifo", "sjf"]
nodes = 4
seeds = [0, 1]

[[trace]]
name = "c10"
path = "data:itp-deadline-cluster10.csv"
format = "itp-deadline"
window = "0:40"
"""


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full = {k: v for k, v in full.items() if v != "<unset>"}
    return subprocess.run([str(BIN / "slurm-rl"), *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=timeout)


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if line.startswith("Error:")]


def test_window_usage_error_exits_2() -> None:
    proc = run("simulate", "--trace", "data:itp-deadline-cluster10.csv", "--format",
               "itp-deadline", "--policy", "fifo", "--load", "0.8", "--window", "5-10")
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "'--window'" in line and "START:COUNT" in line and "'5-10'" in line


def test_trace_name_without_data_prefix_gets_a_hint(tmp_path: Path) -> None:
    proc = run("simulate", "--trace", "itp-deadline-cluster10.csv", "--format", "itp-deadline",
               "--policy", "fifo", "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "--trace data:itp-deadline-cluster10.csv" in line
    proc = run("simulate", "--trace", "nothere.csv", "--format", "itp-deadline", "--policy",
               "fifo", "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2
    [line] = error_lines(proc)
    assert "no such file: nothere.csv" in line and "data:" not in line
    proc = run("simulate", "--trace", "data:nothere.swf", "--format", "swf", "--policy",
               "fifo", "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2
    [line] = error_lines(proc)
    assert "no shipped trace 'nothere.swf'" in line and "itp-cluster01.swf" in line


def test_config_error_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\ninterval_s = "x"\n[database]\npath = "new/x.db"\n')
    for args in (["daemon", "--once"], ["status"], ["db", "upgrade"]):
        proc = run(*args, "--config", str(bad), cwd=tmp_path)
        assert proc.returncode == 1, (args, proc.stderr)
        [line] = error_lines(proc)
        assert "daemon.interval_s: expected a number" in line and str(bad) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_database_in_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.db"
    for args in (["daemon", "--once", "--dry-run"], ["db", "upgrade"], ["status"]):
        proc = run(*args, "--db", str(target), env={"SLURM_RL_CONFIG": "<unset>"})
        assert proc.returncode == 1, (args, proc.stderr)
        [line] = error_lines(proc)
        assert f"folder {tmp_path / 'no' / 'such' / 'dir'} does not exist" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(Path("/etc/slurm-rl/slurm-rl.toml").exists(),
                    reason="this host has a site config: the default database is asked for")
def test_daemon_without_config_or_db_creates_no_database(tmp_path: Path) -> None:
    existed = Path("/var/lib/slurm-rl").exists()
    proc = run("daemon", "--once", "--dry-run", env={"SLURM_RL_CONFIG": "<unset>"},
               cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    [line] = error_lines(proc)
    assert "no database at /var/lib/slurm-rl/slurm-rl.db" in line and "--db FILE" in line
    assert Path("/var/lib/slurm-rl").exists() == existed
    assert not Path("/var/lib/slurm-rl/slurm-rl.db").exists() or existed


def test_open_database_without_create_refuses_a_missing_file(tmp_path: Path) -> None:
    from slurm_rl.daemon.cli import DatabaseUnusable, open_database

    with pytest.raises(DatabaseUnusable, match="no database at"):
        open_database(tmp_path / "x.db", create=False)
    assert list(tmp_path.iterdir()) == []


def test_wrong_slurm_conf_fails_at_once(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    started = time.monotonic()
    proc = run("daemon", "--once", "--db", str(db),
               env={"SLURM_CONF": str(tmp_path / "nope" / "slurm.conf")})
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    [line] = error_lines(proc)
    assert f"SLURM_CONF={tmp_path / 'nope' / 'slurm.conf'}: no such file" in line
    assert took < 20, f"{took:.1f} s: squeue's own retries (~60 s) were not avoided"
    assert list(tmp_path.iterdir()) == []


def test_agent_interval_validated_like_the_config() -> None:
    proc = run("agent", "--interval", "-5")
    assert proc.returncode == 2
    [line] = error_lines(proc)
    assert "'--interval'" in line and "between 0.1 and 86400" in line


def test_command_needing_torch_says_so_in_one_line(tmp_path: Path) -> None:
    # torch is setup.cfg's optional [rl] extra; a meta-path finder hides it here.
    script = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from slurm_rl.cli import main\n"
        "main()\n")
    (tmp_path / "s.toml").write_text(
        '[train]\niterations = 1\nworkers = 1\nimitation_epochs = 0\n'
        '[[scenario]]\ntrace = "data:itp-deadline-cluster01.csv"\nwindows = ["0:30"]\n'
        '[[validation]]\ntrace = "data:itp-deadline-cluster03.csv"\nwindows = ["0:30"]\n')
    for args in (["train", "--scenarios", "s.toml", "--out", "out/x.pt"],
                 ["train", "--scenarios", "s.toml", "--init", "x.pt", "--out", "out/x.pt"],
                 ["simulate", "--trace", "data:itp-deadline-cluster10.csv", "--format",
                  "itp-deadline", "--policy", "rl", "--load", "0.8", "--window", "0:10"]):
        proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        [line] = error_lines(proc)
        assert "needs torch" in line and "download.pytorch.org/whl/cpu" in line
        assert "'torch==2.13.0+cpu'" in line and "slurm-rl[rl]" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]
    listing = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0 and "train" in listing.stdout


def test_evaluate_prints_progress_lines_and_keeps_earlier_results(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIOS)
    first = run("evaluate", "--scenarios", str(toml), timeout=300)
    assert first.returncode == 0, first.stderr
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 4 and lines[0].startswith("[1/4] c10 fifo")
    assert lines[-1].startswith("[4/4]") and "elapsed, about 0:00 left" in lines[-1]
    shipped = (tmp_path / "out" / "results.json").read_text()
    second = run("evaluate", "--scenarios", str(toml), "--no-progress", timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"writing to {tmp_path / 'out-2'}" in second.stderr
    assert not [ln for ln in second.stderr.splitlines() if ln.startswith("[")]
    assert (tmp_path / "out" / "results.json").read_text() == shipped
    runs = json.loads((tmp_path / "out-2" / "results.json").read_text())["runs"]
    assert len(runs) == 4
    third = run("evaluate", "--scenarios", str(toml), "--no-progress", "--out",
                str(tmp_path / "out"), timeout=300)  # asked for: replaces
    assert third.returncode == 0 and not (tmp_path / "out-3").exists()


def test_sim_to_real_raw_never_replaces_a_file(tmp_path: Path) -> None:
    saved = tmp_path / "replay.json"
    saved.write_text("{}")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sim_to_real.py"),
                           "--resim", str(REPO / "docs" / "sim-to-real" / "replay-4.json"),
                           "--raw", str(saved)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--raw {saved} exists" in proc.stderr.splitlines()[-1]
    assert saved.read_text() == "{}"


def test_unknown_policy_is_a_usage_error_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    for args in (["daemon", "--once", "--db", str(db), "--policy", "nosuch"],
                 ["simulate", "--trace", "data:itp-deadline-cluster10.csv", "--format",
                  "itp-deadline", "--policy", "nosuch", "--load", "0.8"]):
        proc = run(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        [line] = error_lines(proc)
        assert "unknown policy 'nosuch'" in line and "fifo" in line
    assert list(tmp_path.iterdir()) == []


def test_no_slurm_configuration_is_named_before_anything_is_created(tmp_path: Path) -> None:
    from slurm_rl.slurm import conf

    assert conf.slurm_conf_problem({}, defaults=(tmp_path / "none.conf",),
                                   no_source=lambda: False) is None  # configless DNS answers
    line = conf.slurm_conf_problem({}, defaults=(tmp_path / "none.conf",),
                                   no_source=lambda: True)
    assert line is not None and "SLURM_CONF is not set" in line and "none.conf" in line
    (tmp_path / "none.conf").write_text("ClusterName=x\n")
    assert conf.slurm_conf_problem({}, defaults=(tmp_path / "none.conf",),
                                   no_source=lambda: True) is None
    (tmp_path / "none.conf").unlink()
    if any(path.is_file() for path in conf.DEFAULT_CONFS) or not conf.configless_fails():
        pytest.skip("this host has a Slurm configuration without SLURM_CONF")
    proc = run("daemon", "--once", "--db", str(tmp_path / "x.db"),
               env={"SLURM_CONF": "<unset>"}, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    [line] = error_lines(proc)
    assert "no Slurm configuration: SLURM_CONF is not set" in line
    assert list(tmp_path.iterdir()) == []


def rlsbatch(*args: str, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in {**os.environ, **(env or {})}.items() if v != "<unset>"}
    return subprocess.run([str(BIN / "rlsbatch"), *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=60)


def test_deadline_takes_slurms_unit_words(tmp_path: Path) -> None:
    for offset, seconds in (("+10min", 600), ("+2hours", 7200), ("+1day", 86400),
                            ("+1hour30minutes", 5400), ("+90m", 5400)):
        before = int(time.time())
        proc = rlsbatch("--rl-dry-run", "-c", "1", "--rl-deadline", offset, "--wrap", "true",
                        cwd=tmp_path)
        assert proc.returncode == 0, (offset, proc.stderr)
        epoch = int(proc.stdout.split("(epoch ")[1].split(")")[0])
        assert before + seconds <= epoch <= int(time.time()) + seconds, offset
    proc = rlsbatch("--rl-dry-run", "-c", "1", "--rl-deadline", "+10months", "--wrap", "true",
                    cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: error: --rl-deadline: can't read '+10months'")
    assert "minutes" in line and "+10min" in line
    assert list(tmp_path.iterdir()) == []


def test_rlsbatch_says_an_ungranted_critical_class_at_submission(tmp_path: Path) -> None:
    import getpass

    args = ("--rl-dry-run", "--rl-class", "critical", "--wrap", "true")
    proc = rlsbatch(*args, env={"SLURM_RL_CONFIG": "<unset>"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [warning] = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlsbatch: warning:")]
    assert f"--rl-class critical is not granted to user {getpass.getuser()}" in warning
    assert "schedules this job as standard" in warning
    config = tmp_path / "rl.toml"
    config.write_text(f'[trust]\ncritical_users = ["{getpass.getuser()}"]\n')
    granted = rlsbatch(*args, env={"SLURM_RL_CONFIG": str(config)}, cwd=tmp_path)
    assert granted.returncode == 0 and "warning" not in granted.stderr
    config.write_text('[trust]\ncritical_accounts = ["urgent"]\n')
    by_account = rlsbatch("-A", "urgent", *args, env={"SLURM_RL_CONFIG": str(config)},
                          cwd=tmp_path)
    assert by_account.returncode == 0 and "warning" not in by_account.stderr
    other = rlsbatch("-A", "other", *args, env={"SLURM_RL_CONFIG": str(config)}, cwd=tmp_path)
    assert f"[trust] in {config}" in other.stderr
