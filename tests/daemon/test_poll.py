"""The incremental poll, on squeue/sinfo output recorded from the 22.05 test cluster."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_rl.daemon.poll import Poller
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.framing import Framing
from slurm_rl.slurm.parse import SQUEUE_FIELDS, parse_squeue
from slurm_rl.slurm.runner import CommandResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
from poll_recording import FIXTURES, RECORDED  # noqa: E402

SQUEUE = (FIXTURES / "squeue-22.05.txt").read_bytes().decode(errors="replace")
HOSTILE = (FIXTURES / "squeue-hostile-22.05.txt").read_bytes().decode(errors="replace")
SINFO = (FIXTURES / "sinfo-marks-22.05.txt").read_text()
END = RECORDED.record_mark + "\n"


class Recorded:
    """A fake runner replaying recorded output: `squeue` gives `self.squeue`, `sinfo` the
    recorded nodes; it remembers the environment each squeue was given."""

    def __init__(self, squeue: str) -> None:
        self.squeue = squeue
        self.envs: list[Mapping[str, str | None]] = []

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            env: Mapping[str, str | None] | None = None) -> CommandResult:
        if args[0] == "squeue":
            self.envs.append(env or {})
            out = self.squeue
        else:  # the recorded nodes, with the marks this sinfo was given
            fmt = args[-1]
            field_mark = fmt[len("NodeList:"):fmt.index(",")]
            record_mark = fmt[fmt.rindex(":") + 1:]
            out = SINFO.replace(RECORDED.field_mark, field_mark).replace(
                RECORDED.record_mark, record_mark)
        return CommandResult(args=tuple(args), returncode=0, stdout=out, stderr="",
                             duration_s=0.0)


def poller(runner: Recorded) -> Poller:
    return Poller(SlurmAdapter(runner, framing=lambda: RECORDED))


def test_only_changed_records_are_new_once_committed() -> None:
    runner = Recorded(SQUEUE)
    p = poller(runner)
    first = p.poll(now=2e9)
    everything = {r.job_id for r in parse_squeue(SQUEUE, RECORDED).records}
    assert {j.id for j in first.jobs} == everything
    assert {j.id for j in first.changed} == everything
    assert len(first.nodes) == 4 and first.quarantined == () and first.bad_nodes == ()
    # Not committed (the database write failed): still all new.
    assert {j.id for j in p.poll(now=2e9).changed} == everything
    p.commit(first)
    assert p.poll(now=2e9 + 10).changed == ()

    chunks = SQUEUE.split(END)
    chunks[0] = chunks[0].replace("CANCELLED", "COMPLETED", 1)
    runner.squeue = END.join(chunks)
    again = p.poll(now=2e9 + 20)
    (changed,) = again.changed
    assert changed.id == chunks[0].split(RECORDED.field_mark)[0]
    assert {j.id for j in again.jobs} == everything


def test_records_are_recognised_when_the_record_mark_changes() -> None:
    """A fresh record mark every poll; the same records must still be recognised (and with a
    different field mark, which a poller never sees, everything is simply new again)."""
    other = Framing(field_mark=RECORDED.field_mark, record_mark="\x1fRfeedface00000000")
    runner = Recorded(SQUEUE)
    marks = [RECORDED]
    p = Poller(SlurmAdapter(runner, framing=lambda: marks[0]))
    first = p.poll(now=2e9)
    p.commit(first)
    marks[0] = other
    runner.squeue = SQUEUE.replace(RECORDED.record_mark, other.record_mark)
    again = p.poll(now=2e9 + 1)
    assert again.changed == () and len(again.jobs) == len(first.jobs) == 9
    assert len(again.nodes) == 4
    p.commit(again)
    marks[0] = Framing(field_mark="\x1fF999999", record_mark=other.record_mark)
    runner.squeue = runner.squeue.replace(RECORDED.field_mark, "\x1fF999999")
    assert len(p.poll(now=2e9 + 2).changed) == 9


def test_running_jobs_get_views_at_the_new_time() -> None:
    p = poller(Recorded(SQUEUE))
    p.commit(p.poll(now=2e9))
    later = p.poll(now=2e9 + 100)
    running = [j for j in later.jobs if j.state.is_running]
    assert running
    for job in running:
        assert job.start_time is not None
        assert job.attained_gpu_s == (2e9 + 100 - job.start_time) * job.gpus


def test_hostile_jobs_do_not_stop_the_poll() -> None:
    polled = poller(Recorded(HOSTILE)).poll(now=2e9)
    assert len(polled.jobs) == 12 and polled.quarantined == ()
    assert {c for c in polled.user_comments.values() if "\n" in c} == {"a\nb"}


def test_bad_records_are_quarantined_and_reported_once() -> None:
    chunks = SQUEUE.split(END)
    bad = chunks[:]
    fields = bad[1].split(RECORDED.field_mark)
    fields[SQUEUE_FIELDS.index("NumNodes")] = "١"
    bad[1] = RECORDED.field_mark.join(fields)
    runner = Recorded(END.join(bad))
    p = poller(runner)
    first = p.poll(now=2e9)
    (q,) = first.quarantined
    assert q.job_id == fields[0] and q.reason.startswith("NumNodes") and q.first_time
    assert q.job_id not in {j.id for j in first.jobs} | {j.id for j in first.changed}
    assert len(first.jobs) == len(chunks) - 2
    p.commit(first)
    (again,) = p.poll(now=2e9 + 1).quarantined
    assert not again.first_time  # logged once
    runner.squeue = SQUEUE  # fixed: the job is back, and new
    fixed = p.poll(now=2e9 + 2)
    assert fixed.quarantined == () and [j.id for j in fixed.changed] == [q.job_id]
    runner.squeue = END.join(bad)  # broken again: reported again
    assert p.poll(now=2e9 + 3).quarantined[0].first_time


def test_a_job_id_printed_twice_is_left_alone() -> None:
    chunks = SQUEUE.split(END)
    runner = Recorded(END.join([chunks[0], *chunks]))
    polled = poller(runner).poll(now=2e9)
    dup = chunks[0].split(RECORDED.field_mark)[0]
    assert dup not in {j.id for j in polled.jobs}
    assert [q.job_id for q in polled.quarantined] == [dup, dup]


def test_the_format_goes_in_the_environment_and_inherited_squeue_settings_are_dropped() -> None:
    runner = Recorded(SQUEUE)
    SlurmAdapter(runner).poll_squeue()
    (env,) = runner.envs
    fmt = env["SQUEUE_FORMAT2"]
    assert fmt is not None and fmt.startswith("JobID:\x1fF") and fmt.count("\x1fR") == 1
    assert env["SQUEUE_FORMAT"] is None and env["SQUEUE_USERS"] is None
    assert env["SLURM_TIME_FORMAT"] == "standard"
    SlurmAdapter(runner).poll_squeue()
    assert runner.envs[1]["SQUEUE_FORMAT2"] != fmt  # a fresh secret every poll


def with_comment(text: str, job_id: str, comment: str) -> str:
    out = []
    for chunk in text.split(END)[:-1]:
        fields = chunk.split(RECORDED.field_mark)
        if fields[0] == job_id:
            fields[SQUEUE_FIELDS.index("Comment")] = comment
        out.append(RECORDED.field_mark.join(fields) + END)
    return "".join(out)


def test_the_poller_fits_the_rate_over_a_runs_reports() -> None:
    """Two progress reports of the recorded running job, seen in two polls: the prediction
    uses the rate between them (300 steps in 60 s), not the last report's own (50/s), and
    counts from the poll's time."""
    (record,) = [r for r in parse_squeue(SQUEUE, RECORDED).records if r.job_id == "4115"]
    assert record.start_time is not None
    t1 = int(record.start_time) + 30
    runner = Recorded(with_comment(SQUEUE, "4115", f"{{rlp:100/1000@9;t={t1}}}"))
    p = poller(runner)
    first = {str(j.id): j for j in p.poll(now=t1 + 5).jobs}["4115"]
    assert first.predicted_remaining_s == pytest.approx(900 / 9 - 5)  # one report: its rate
    p.commit(p.poll(now=t1 + 5))
    runner.squeue = with_comment(SQUEUE, "4115", f"{{rlp:400/1000@50;t={t1 + 60}}}")
    second = {str(j.id): j for j in p.poll(now=t1 + 70).jobs}["4115"]
    assert second.predicted_remaining_s == pytest.approx(600 / 5 - 10)
    # An unchanged record at a later poll: the same fit, ten seconds less.
    p.commit(p.poll(now=t1 + 70))
    third = {str(j.id): j for j in p.poll(now=t1 + 80).jobs}["4115"]
    assert third.predicted_remaining_s == pytest.approx(600 / 5 - 20)


def test_a_report_dated_in_the_future_is_dated_when_the_poll_saw_it() -> None:
    (record,) = [r for r in parse_squeue(SQUEUE, RECORDED).records if r.job_id == "4115"]
    assert record.start_time is not None
    now = int(record.start_time) + 30
    runner = Recorded(with_comment(SQUEUE, "4115", "{rlp:100/1000@9;t=4102444800}"))  # 2100
    p = poller(runner)
    first = p.poll(now=now)
    job = {str(j.id): j for j in first.jobs}["4115"]
    assert job.progress is not None and job.progress.updated_at == now
    assert job.predicted_remaining_s == pytest.approx(900 / 9)
    p.commit(first)  # kept as first seen: at a later poll the report is still dated `now`
    later = {str(j.id): j for j in p.poll(now=now + 10).jobs}["4115"]
    assert later.progress is not None and later.progress.updated_at == now
    assert later.predicted_remaining_s == pytest.approx(900 / 9 - 10)


def test_a_rate_fitted_from_reports_dated_close_together_is_held_to_the_model() -> None:
    """Two reports a second apart by their own dates, 5,000 steps between them: the fit gives
    5,000 steps/s, far above what resnet50 could be believed to run at on the job's GPUs; the
    prediction uses at most that ceiling."""
    from slurm_rl import perfmodel
    from slurm_rl.core import Intent
    from slurm_rl.submit.intent import compose_comment

    (record,) = [r for r in parse_squeue(SQUEUE, RECORDED).records if r.job_id == "4115"]
    assert record.start_time is not None
    t = int(record.start_time) + 600
    tag = compose_comment("", Intent(model="resnet50"))
    runner = Recorded(with_comment(SQUEUE, "4115", tag + f"{{rlp:0/1000000;t={t}}}"))
    p = poller(runner)
    p.commit(p.poll(now=t))
    runner.squeue = with_comment(SQUEUE, "4115", tag + f"{{rlp:5000/1000000;t={t + 1}}}")
    job = {str(j.id): j for j in p.poll(now=t + 1).jobs}["4115"]
    ceiling = perfmodel.rate_ceiling("resnet50", record.gpus)
    assert ceiling is not None and ceiling < 5000
    assert job.predicted_remaining_s == pytest.approx(995_000 / ceiling)
