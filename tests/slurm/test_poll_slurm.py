"""On the real test cluster: jobs whose names and comments could stop every cycle of a
naive poller are polled with an honest job next to them; nothing raises and the honest job
is right."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from poll_recording import HOSTILE_COMMENTS, HOSTILE_NAMES

from slurm_rl.core import JobState, JobView
from slurm_rl.daemon.poll import Poller
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import SqueueRecord

pytestmark = pytest.mark.slurm


def sbatch(name: str | bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["sbatch", "--parsable", "-H", "-J", name, "-o", "/dev/null",
                           "-e", "/dev/null", *args, "--wrap", "true"], capture_output=True)


def job_id(proc: subprocess.CompletedProcess[bytes]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().strip().split(";")[0]


def test_poisonous_jobs_do_not_stop_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    # Settings a daemon could inherit that would change what squeue selects or prints.
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    monkeypatch.setenv("SQUEUE_USERS", "nobody")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    tag = f"rlpz-{uuid.uuid4().hex[:8]}"
    ids: dict[str, str] = {}
    try:
        ids["honest"] = job_id(sbatch(f"{tag}-honest", "--gres=gpu:1", "-t", "10"))
        for key, comment in HOSTILE_COMMENTS.items():
            proc = sbatch(f"{tag}-{key}", f"--comment={comment}")
            if proc.returncode != 0:  # refused at submission (a site's job_submit plugin):
                proc = sbatch(f"{tag}-{key}")  # the operator path still sets it
                ids[key] = job_id(proc)
                subprocess.run(["scontrol", "update", f"JobId={ids[key]}", f"Comment={comment}"],
                               check=True, capture_output=True)
            else:
                ids[key] = job_id(proc)
        for key, name in HOSTILE_NAMES.items():
            ids[key] = job_id(sbatch(tag.encode() + b"-" + name))

        polled = Poller(SlurmAdapter()).poll(now=time.time())
        parsed = SlurmAdapter().poll_squeue()
    finally:
        subprocess.run(["scancel", *ids.values()], capture_output=True, check=False)

    views: dict[str, JobView] = {j.id: j for j in polled.jobs}
    honest = views[ids["honest"]]
    assert honest.name == f"{tag}-honest" and honest.state is JobState.PENDING
    assert honest.held and honest.gpus == 1 and honest.time_limit_s == 600
    assert abs(honest.submit_time - time.time()) < 600  # a standard time, not a relative one
    assert honest in polled.changed
    quarantined = {q.job_id for q in polled.quarantined}
    records: dict[str, SqueueRecord] = {r.job_id: r for r in parsed.records}
    for key, comment in HOSTILE_COMMENTS.items():
        jid = ids[key]
        assert jid in quarantined or records[jid].comment == comment, key
        assert (jid in views) != (jid in quarantined)
    names = {"n-nl": "n-nl\nx", "n-us": "n-us\x1fx", "n-ff": "n-ff\ufffdx"}
    for key, name in names.items():
        jid = ids[key]
        assert jid in quarantined or records[jid].name == f"{tag}-{name}", key
    # With the marks, none of them needs quarantine at all.
    assert not quarantined & set(ids.values())


def test_a_two_node_job_shows_both_nodes_and_their_gpus() -> None:
    """The daemon's poll expands squeue's compressed node list: a running -N 2 --gres=gpu:1
    job's view names the two nodes Slurm gave it (as `scontrol show hostnames` expands them),
    one GPU on each."""
    tag = f"rlnodes-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(["sbatch", "--parsable", "-J", tag, "-N", "2", "--gres=gpu:1",
                           "-t", "2", "-o", "/dev/null", "-e", "/dev/null", "--wrap", "sleep 60"],
                          capture_output=True)
    jid = job_id(proc)
    try:
        poller = Poller(SlurmAdapter(scope=lambda record, has_intent: True))
        view: JobView | None = None
        for _ in range(60):  # other helpers' jobs may hold the GPUs for a while
            view = {str(j.id): j for j in poller.poll(now=time.time()).jobs}.get(jid)
            if view is not None and view.state is JobState.RUNNING:
                break
            time.sleep(1)
        assert view is not None and view.state is JobState.RUNNING, view
        node_list = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%N"], capture_output=True,
                                   text=True, check=True).stdout.strip()
        slurm_says = subprocess.run(["scontrol", "show", "hostnames", node_list],
                                    capture_output=True, text=True, check=True).stdout.split()
    finally:
        subprocess.run(["scancel", jid], capture_output=True, check=False)
    assert len(slurm_says) == 2
    assert view.placement == tuple((name, 1) for name in slurm_says)
    assert view.nodes == 2 and view.gpus == 2
