"""Holding jobs to the sizes they claim, and each user's record of how right their claims were.

A job's steps and model (rlsbatch --rl-steps/--rl-model) and its progress reports say how long
it will run; a size-based policy ranks on that, so a short claim would buy priority. The checks
that need no memory live with the estimates themselves (policies/estimates.py: no progress before
a job has run, none faster than its model's measured throughput). What needs memory is here:

- While a job runs, the earliest end its believable claims stated in this run is remembered.
  Once the run has gone past that end by more than `tolerance` x the claimed run time plus
  `allowance_s`, the job is marked `claim_overrun`: its claims are no longer believed and it is
  estimated from what was observed.
- A job reporting progress that no run could have made since its submission (more steps, or a
  faster rate, than its model's measured throughput allows, with slack) is a wrong claim of its
  owner's while it is in the queue.
- When a job finishes, its claimed run time (of its last run) and its observed one are stored in
  `claim_records`, once per job (keyed by id and submit time: Slurm reuses ids). A user's record
  is their newest `remember` judged claims, together with their jobs overrunning now. A record
  with a wrong claim (over the tolerance) makes the user's claims not believed: `claim_ratio`
  inf. Otherwise their claims are stretched by the most their jobs ran over them (beyond the
  allowance), so an honest user whose jobs run a little slower than profiled is calibrated and
  a user with no record starts neutral (1).

Only the views whose claim fields differ from the defaults are rebuilt; for those the daemon's
own prediction (made from the job's progress) is dropped, so that every policy goes through the
estimates, which apply the record.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from slurm_rl.config import ClaimsConfig
from slurm_rl.core import ClusterSnapshot, JobId, JobView
from slurm_rl.db.models import ClaimRecord
from slurm_rl.policies.estimates import claimed_remaining, claimed_run_s, impossible_progress
from slurm_rl.policies.formatting import fmt_dur

_records = ClaimRecord.__table__
_RunKey = tuple[JobId, float, float]
"""(job id, submit time, run start)."""


@dataclass(frozen=True, kw_only=True)
class Judged:
    """One claim held against what its run did."""

    claimed_s: float
    observed_s: float


IMPOSSIBLE = Judged(claimed_s=0.0, observed_s=math.inf)
"""A progress report no run could have made (estimates.impossible_progress): a wrong claim."""


def overran(judged: Judged, rules: ClaimsConfig) -> float:
    """How many times its claim the run took beyond the start-up allowance (at least 1)."""
    if judged.claimed_s <= 0:
        return math.inf if judged.observed_s > rules.allowance_s else 1.0
    return max(1.0, (judged.observed_s - rules.allowance_s) / judged.claimed_s)


def is_wrong(judged: Judged, rules: ClaimsConfig) -> bool:
    """The run took more than `tolerance` x its claim plus the allowance."""
    return judged.observed_s > rules.tolerance * judged.claimed_s + rules.allowance_s


def stored_record(session: Session, user: str, rules: ClaimsConfig) -> list[Judged]:
    """The user's judged claims on record, oldest first (`slurm-rl explain` shows them)."""
    rows = session.execute(
        select(_records.c.claimed_s, _records.c.observed_s).where(_records.c.user == user)
        .order_by(_records.c.id.desc()).limit(rules.remember)).all()
    return [Judged(claimed_s=c, observed_s=o) for c, o in reversed(rows)]


def describe_record(user: str, record: Sequence[Judged], rules: ClaimsConfig) -> str:
    """One line on what the user's record does to their claims."""
    if not record:
        return f"claims of {user}: no record yet, believed as stated"
    ratio = user_ratio(record, rules)
    n = len(record)
    if ratio == math.inf:
        worst = max(record, key=lambda j: j.observed_s / max(j.claimed_s, 1e-9))
        return (f"claims of {user}: NOT believed (a job ran {fmt_dur(worst.observed_s)} against "
                f"{fmt_dur(worst.claimed_s)} claimed, over {rules.tolerance:g}x + "
                f"{fmt_dur(rules.allowance_s)}; {n} judged): their jobs rank as if they claimed "
                f"nothing")
    if ratio > 1.0:
        return f"claims of {user}: stretched x{ratio:.3g} (their jobs ran longer; {n} judged)"
    return f"claims of {user}: believed as stated ({n} judged, none overran)"


def user_ratio(record: Iterable[Judged], rules: ClaimsConfig) -> float:
    """What a user's claims are stretched by: inf (not believed) if any judged claim of the
    record was wrong, else the most any of them overran (1: none did, or no record)."""
    worst = 1.0
    for judged in record:
        if is_wrong(judged, rules):
            return math.inf
        worst = max(worst, overran(judged, rules))
    return worst


class ClaimChecker:
    """The daemon's memory of claims: the end each running job's claims stated, and every
    user's record (loaded from the database once, then kept as records are added)."""

    def __init__(self, rules: ClaimsConfig) -> None:
        self.rules = rules
        self._ends: dict[_RunKey, float] = {}
        """The earliest end each current run's claims stated."""
        self._overrun: set[_RunKey] = set()
        """Runs found past their stated end: their later claims are not believed."""
        self._records: dict[str, deque[Judged]] | None = None
        self._judged: set[tuple[JobId, float]] = set()
        """Finished jobs already stored (or found stored) in this daemon's life."""
        self._views: dict[JobId, tuple[JobView, JobView]] = {}
        """(view shown by Slurm, the view with its claim fields): the same object while
        neither changes, so that policies keeping work per view keep it."""

    def check(self, session: Session, snapshot: ClusterSnapshot,
              finished: Sequence[JobView] = ()) -> ClusterSnapshot:
        """The snapshot with each job's claim fields set; the claims of `finished` jobs (with
        the intent the daemon believed of them) stored (the caller commits)."""
        now = snapshot.time
        records = self._load(session)
        live: dict[str, list[Judged]] = {}
        overrun: set[JobId] = set()
        shown = {(j.id, j.submit_time): j for j in (*snapshot.jobs, *finished)
                 if j.state.is_finished}
        self._judged &= shown.keys()  # squeue shows a finished job for MinJobAge only
        done = [j for key, j in shown.items() if key not in self._judged]
        ends: dict[_RunKey, float] = {}
        overran_runs: set[_RunKey] = set()
        for j in snapshot.jobs:
            if not j.state.is_finished and impossible_progress(j, now):
                live.setdefault(j.user, []).append(IMPOSSIBLE)
            if j.state.is_running and j.start_time is not None:
                key = (j.id, j.submit_time, j.start_time)
                end = self._stated_end(j, now, self._ends.get(key), key in self._overrun)
                if end is None:
                    continue
                ends[key] = end
                judged = Judged(claimed_s=end - j.start_time, observed_s=now - j.start_time)
                if is_wrong(judged, self.rules):
                    overrun.add(j.id)
                    overran_runs.add(key)
                if judged.observed_s > judged.claimed_s:
                    live.setdefault(j.user, []).append(judged)
        self._store_finished(session, done, now, records)
        self._ends, self._overrun = ends, overran_runs
        users = {j.user for j in snapshot.jobs} & {*records, *live}
        ratios = {user: user_ratio([*records.get(user, ()), *live.get(user, ())], self.rules)
                  for user in users}
        return self._annotate(snapshot, ratios, overrun)

    def record_of(self, user: str) -> tuple[float, int]:
        """(the ratio the user's claims are stretched by, judged claims on record) as last
        loaded; (1.0, 0) before the first cycle or for a user with no record."""
        record = (self._records or {}).get(user)
        if not record:
            return 1.0, 0
        return user_ratio(record, self.rules), len(record)

    # --- claims of a run ----------------------------------------------------------------------
    def _stated_end(self, j: JobView, now: float, earlier: float | None, overrun: bool
                    ) -> float | None:
        """The earliest end any believable claim of this run stated (None: it claims none)."""
        assert j.start_time is not None
        ends = [] if earlier is None else [earlier]
        whole = claimed_run_s(j)
        if whole is not None:
            ends.append(j.start_time + whole)
        if not overrun:  # an overrun run's later claims are not believed
            est = claimed_remaining(j, now)
            if est is not None and est.seconds < math.inf:
                ends.append(now + est.seconds)
        return min(ends) if ends else None

    def _store_finished(self, session: Session, jobs: list[JobView], now: float,
                        records: dict[str, deque[Judged]]) -> None:
        if not jobs:
            return
        stored = {(JobId(r.job_id), r.submit_time) for r in session.execute(
            select(_records.c.job_id, _records.c.submit_time)
            .where(_records.c.job_id.in_([j.id for j in jobs])))}
        for j in jobs:
            key = (j.id, j.submit_time)
            self._judged.add(key)
            if key in stored or j.start_time is None or j.end_time is None:
                continue
            end = self._ends.get((j.id, j.submit_time, j.start_time))
            if end is None and j.restarts == 0:
                whole = claimed_run_s(j)  # started and ended between two polls
                end = j.start_time + whole if whole is not None else None
            if end is None:
                continue
            judged = Judged(claimed_s=max(0.0, end - j.start_time),
                            observed_s=max(0.0, j.end_time - j.start_time))
            session.add(ClaimRecord(user=j.user, job_id=j.id, submit_time=j.submit_time,
                                    claimed_s=judged.claimed_s, observed_s=judged.observed_s,
                                    at=now))
            record = records.setdefault(j.user, deque(maxlen=self.rules.remember))
            record.append(judged)
            self._prune(session, j.user)

    def _prune(self, session: Session, user: str) -> None:
        """Keep the user's newest `remember` records."""
        session.flush()
        keep = select(_records.c.id).where(_records.c.user == user).order_by(
            _records.c.id.desc()).limit(self.rules.remember)
        session.execute(delete(_records).where(_records.c.user == user,
                                               _records.c.id.not_in(keep)))

    def _load(self, session: Session) -> dict[str, deque[Judged]]:
        if self._records is None:
            records: dict[str, deque[Judged]] = {}
            for user, claimed, observed in session.execute(
                    select(_records.c.user, _records.c.claimed_s, _records.c.observed_s)
                    .order_by(_records.c.id)):
                records.setdefault(user, deque(maxlen=self.rules.remember)).append(
                    Judged(claimed_s=claimed, observed_s=observed))
            self._records = records
        return self._records

    # --- views --------------------------------------------------------------------------------
    def _annotate(self, snapshot: ClusterSnapshot, ratios: Mapping[str, float],
                  overrun: set[JobId]) -> ClusterSnapshot:
        if not overrun and all(r == 1.0 for r in ratios.values()):
            self._views = {}  # no view to rebuild (the usual case: no record stretches claims)
            return snapshot
        views = self._views
        kept: dict[JobId, tuple[JobView, JobView]] = {}
        jobs: list[JobView] = []
        touched = False
        for j in snapshot.jobs:
            ratio = ratios.get(j.user, 1.0)
            over = j.id in overrun
            if ratio == 1.0 and not over or j.state.is_finished:
                jobs.append(j)
                continue
            touched = True
            old = views.get(j.id)
            if (old is not None and old[0] is j and old[1].claim_ratio == ratio
                    and old[1].claim_overrun == over):
                shown = old[1]
            else:
                shown = replace(j, claim_ratio=ratio, claim_overrun=over,
                                predicted_remaining_s=None)
            kept[j.id] = (j, shown)
            jobs.append(shown)
        self._views = kept
        return replace(snapshot, jobs=tuple(jobs)) if touched else snapshot
