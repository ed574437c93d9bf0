"""Prometheus metrics: off by default; with [metrics] address set, scraped over HTTP while the
daemon orders this test's jobs on the test cluster."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, squeue, wait_for
from prometheus_client.parser import text_string_to_metric_families

from slurm_rl.core import Intent, JobState
from slurm_rl.daemon.metrics import DaemonMetrics, MetricsError, deadline_outcome


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), -1.0)


def test_deadline_outcomes() -> None:
    assert deadline_outcome(JobState.COMPLETED, 10.0, 10.0) == "met"
    assert deadline_outcome(JobState.COMPLETED, 11.0, 10.0) == "missed"
    assert deadline_outcome(JobState.TIMEOUT, 5.0, 10.0) == "not_completed"
    assert deadline_outcome(JobState.CANCELLED, None, 10.0) == "not_completed"


def test_an_address_in_use_is_one_line() -> None:
    first = DaemonMetrics()
    host, port = first.serve("127.0.0.1:0")
    try:
        with pytest.raises(MetricsError, match=r"metrics.address '127.0.0.1:\d+': can not"):
            DaemonMetrics().serve(f"{host}:{port}")
    finally:
        first.close()


@pytest.mark.slurm
def test_the_endpoint_is_scraped_while_the_daemon_runs(jobs: Jobs, tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    config = tmp_path / "slurm-rl.toml"
    config.write_text(f'[database]\npath = "{db}"\n[metrics]\naddress = "127.0.0.1:0"\n')
    for i in range(3):
        jobs.submit(f"p{i}", intent=Intent(deadline=float(int(time.time()) + 7200 + i)),
                    begin="now+3600")
    log_path = tmp_path / "daemon.log"
    log = log_path.open("w")
    proc = subprocess.Popen([SLURM_RL, "daemon", "--config", str(config), "--interval", "0.5",
                             "--policy", "deadline", "--only-name-prefix", jobs.prefix],
                            stderr=log)
    try:
        found = wait_for(lambda: re.search(r"metrics at (http://\S+/metrics)",
                                           log_path.read_text()), 60, "the metrics line")
        url = found.group(1)
        # The first cycle ranks the three jobs: one SiteFactor action, counted.
        wait_for(lambda: value(scrape(url), "slurm_rl_actions_total", kind="site_factor",
                               outcome="done") >= 1, 60, "the first cycle's action")
        # A job with a deadline that it meets, finishing while the daemon watches.
        done = jobs.submit("done", intent=Intent(deadline=float(int(time.time()) + 3600)),
                           sleep=0.5)
        wait_for(lambda: squeue([done], "State").get(done, [""])[0] == "COMPLETED", 90,
                 "the job to complete")
        ok = value(scrape(url), "slurm_rl_cycles_total", result="ok")
        wait_for(lambda: value(scrape(url), "slurm_rl_cycles_total", result="ok") >= ok + 2,
                 30, "two more cycles")
        samples = scrape(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0, log_path.read_text()
    for phase in ("poll", "persist", "decide", "act", "total"):
        assert value(samples, "slurm_rl_cycle_seconds_count", phase=phase) >= 2
    assert value(samples, "slurm_rl_cycle_seconds_bucket", phase="total", le="+Inf") >= 2
    assert value(samples, "slurm_rl_jobs", state="PENDING") >= 3
    assert value(samples, "slurm_rl_managed_pending_jobs") >= 3
    assert value(samples, "slurm_rl_decisions_total", policy="deadline", mode="live") >= 2
    assert value(samples, "slurm_rl_actions_total", kind="site_factor", outcome="done") >= 1
    assert value(samples, "slurm_rl_job_updates_total", result="applied") >= 3
    assert value(samples, "slurm_rl_policy_info", policy="deadline") == 1
    assert value(samples, "slurm_rl_slurm_unavailable") == 0
    assert value(samples, "slurm_rl_deadlines_total", outcome="met") >= 1  # ours, at least
    assert value(samples, "slurm_rl_last_cycle_timestamp_seconds") > time.time() - 120


@pytest.mark.slurm
def test_metrics_are_off_by_default(jobs: Jobs, tmp_path: Path) -> None:
    out = subprocess.run([SLURM_RL, "daemon", "--db", str(tmp_path / "o.db"), "--once",
                          "--only-name-prefix", jobs.prefix], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "metrics at" not in out.stderr


def test_the_grafana_dashboard_draws_only_metrics_the_daemon_exports() -> None:
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json")
                           .read_text())
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",)}
    exported = {f.name + suffix for f in DaemonMetrics().registry.collect()
                for suffix in suffixes[f.type]}
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"slurm_rl_\w+", e)}
    assert used and used <= exported, used - exported
    assert {"slurm_rl_cycle_seconds_bucket", "slurm_rl_jobs", "slurm_rl_actions_total",
            "slurm_rl_deadlines_total", "slurm_rl_policy_info",
            "slurm_rl_slurm_unavailable"} <= used
