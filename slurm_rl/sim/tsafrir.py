"""Time limits as users give them: the model of Tsafrir, Etsion and Feitelson, "Modeling User
Runtime Estimates" (JSSPP 2005, LNCS 3834), as its authors implemented it (est_model.cc of
their m_tsafrir05 model).

Users do not estimate a run time; they pick one of a few round values. Twenty values (the
*head*) are asked for by 89 % of the jobs: the partition's maximum, which is the most popular
single value, and 5, 10, 15, 20, 30 minutes, 1, 2, 3, 4, 5, 6, 8, 10, 12 and 18 hours (the 15
values among the 20 most popular in all four logs the authors studied), completed with round
multiples below the maximum. The other 11 % are spread over a *tail* of less popular values.
The model builds that histogram of values and shares, and a job asks for one of the values at
least as long as its run time, so a job never runs past its limit and its accuracy (run time
/ limit) spreads over (0, 1].

Each step below is the authors'; the parameters are their defaults (est_model.hh):
- shares of the head by popularity rank x = 2..20: 14.0491 e^(-0.177531 x) + 0.462513 %;
  rank 1 (the maximum) takes the rest of the head's 89 % (21.7 %);
- which head value takes which popularity rank: drawn per time rank, from the ranks the
  same time rank had in the four logs (their table), favouring the more popular of two draws,
  and forcing a rank once its last time rank in the logs has passed;
- the tail's values: y = (a - 1) x / (a - x) of the maximum at x = i / n, i = 1..n, a = 1 +
  12.1039 K^-0.6026 for K values in all, rounded to whole minutes (moved by 30, 20 or 10 s
  where they would collide); its shares 795.6 r^-2.267 for popularity ranks r = 21..,
  scaled to 11 %, matched to the values at random.

What differs from the authors' code, so that a job's limit depends only on the seed, the job
and its run time (not on the other jobs of a window): the number of values K is a parameter
(the paper derives it from the log's job count; 90 is its value for a 10,000-job log), the
shares are kept as shares (the paper rounds them to job counts of the log), and each job draws
its value on its own from the histogram cut to the values >= its run time, in proportion to
their shares (the paper matches the log's estimates to its jobs, longest job first, each job
taking one of the remaining estimates >= its run time at random).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import random
from dataclasses import dataclass

MINUTE = 60
HOUR = 3600
TOP = 20
"""Values in the head of the histogram."""
JOINT = tuple(m * MINUTE for m in (5, 15, 10, 20, 30)) + tuple(
    h * HOUR for h in (1, 2, 3, 4, 5, 6, 8, 10, 12, 18))
"""The 15 values among the top 20 of all four logs (the maximum comes on top of them)."""
ROUND = tuple(h * HOUR for h in (200, 100, 50, 10, 5, 2, 1)) + tuple(
    m * MINUTE for m in (20, 10, 5))
"""Multiples that complete the head, from the maximum down (first of 200 h, then 100 h ...)."""
TIME_RANK_TO_POPULARITY: tuple[tuple[int, ...], ...] = (
    # SDSC, CTC, KTH, Blue: the popularity rank of the head value of each time rank (0: the
    # maximum, then ascending time) in the four logs.
    (3, 1, 1, 1), (1, 3, 4, 6), (4, 4, 10, 5), (17, 2, 14, 3), (13, 12, 20, 7),
    (7, 9, 2, 2), (8, 8, 3, 18), (18, 18, 7, 19), (2, 6, 12, 4), (6, 7, 6, 11),
    (16, 11, 19, 20), (10, 20, 5, 9), (5, 16, 18, 10), (15, 5, 16, 14), (14, 14, 9, 13),
    (19, 13, 17, 16), (11, 10, 15, 15), (12, 15, 13, 17), (9, 17, 8, 8), (20, 19, 11, 12),
)
HEAD_SIZE = (14.0491, -0.177531, 0.462513)
"""a, b, c of the head's share (percent) by popularity rank x >= 2: a e^(b x) + c."""
HEAD_SHARE = 0.89
"""Share of jobs asking for one of the head's values."""
TAIL_SIZE = (795.6, -2.267)
"""a, b of the tail's share by popularity rank r >= 21: a r^b (then scaled)."""
TAIL_TIME = (12.1039, -0.6026)
"""p, q of the tail values' curve parameter a = 1 + p K^q."""
BINS_BY_JOBS = ((0, 0), (20, 10), (200, 20), (1000, 35), (10000, 90), (70000, 340),
                (250000, 565))
"""The paper's number of distinct values as a function of the log's job count (piecewise
linear)."""
DEFAULT_BINS = 90
"""Distinct values in all: the paper's count for a log of 10,000 jobs."""
_TAIL_OFFSETS = (0, 30, -30, 20, -20, 10, -10)


def bins_for_jobs(jobs: int) -> int:
    """The paper's number of distinct estimates in a log of `jobs` jobs."""
    if jobs >= BINS_BY_JOBS[-1][0]:
        return BINS_BY_JOBS[-1][1]
    for (x0, y0), (x1, y1) in zip(BINS_BY_JOBS, BINS_BY_JOBS[1:], strict=False):
        if jobs <= x1:
            return y0 + _round((jobs - x0) * (y1 - y0) / (x1 - x0))
    raise AssertionError("unreachable")


def _round(x: float) -> int:
    """C's round(): halves away from zero (Python's round() goes to the even neighbour)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def head_times(max_s: int) -> tuple[int, ...]:
    """The head's values in seconds: the maximum first, then the others ascending."""
    values = [max_s] + [v for v in JOINT if v < max_s]
    for mul in ROUND:
        if len(values) >= TOP:
            break
        top = (max_s // mul) * mul
        for v in range(top, 0, -mul):
            if v not in values:
                values.append(v)
                if len(values) >= TOP:
                    break
    return (max_s, *sorted(values[1:]))


def head_shares(n: int, max_share: float | None, head_share: float) -> tuple[float, ...]:
    """Shares (fractions of jobs) of the head's popularity ranks 1..n; rank 1 is the maximum.
    `max_share` None: the model's (what the head's share leaves); else the other ranks are
    scaled so that the head still holds `head_share`, as the paper does when a log's share at
    the maximum is given."""
    a, b, c = HEAD_SIZE
    rest = [(a * math.exp(b * x) + c) / 100.0 for x in range(2, n + 1)]
    if max_share is None:
        first = head_share - sum(rest)
    else:
        first = max_share
        scale = (head_share - first) / sum(rest) if rest else 0.0
        rest = [s * scale for s in rest]
    if first <= 0:
        raise ValueError(f"the head's share {head_share} leaves nothing for the maximum")
    return (first, *rest)


def popularity_ranks(n: int, rng: random.Random) -> tuple[int, ...]:
    """For each of the head's n time ranks (0: the maximum, then ascending time), the
    popularity rank (1: most popular) it takes: the maximum is rank 1; a rank whose last time
    rank in the four logs has come is taken at once (the most popular such first); otherwise
    the more popular of two draws from the ranks this and the earlier time ranks had in the
    logs and that are still free."""
    rows = TIME_RANK_TO_POPULARITY
    due: dict[int, int] = {}  # popularity rank -> the last time rank at which a log has it
    for ttr, row in enumerate(rows):
        for rank in row:
            due[rank] = ttr
    chosen: list[int] = []
    taken: set[int] = set()
    pool: list[int] = []
    for ttr in range(n):
        if ttr < len(rows):
            pool.extend(r for r in rows[ttr] if r not in taken and r <= n)
        rank = -1
        if ttr == 0:
            rank = 1
        if rank < 0:
            rank = next((r for r in range(1, n + 1)
                         if due.get(r, len(rows)) <= ttr and r not in taken), -1)
        if rank < 0 and pool:
            for _ in range(2):
                pick = pool[rng.randrange(len(pool))]
                if rank < 0 or pick < rank:
                    rank = pick
        if rank < 0:  # (a short head: the logs' ranks ran out) the most popular free one
            rank = next(r for r in range(1, n + 1) if r not in taken)
        chosen.append(rank)
        taken.add(rank)
        pool = [r for r in pool if r != rank]
    return tuple(chosen)


def tail_times(max_s: int, bins: int, count: int, used: set[int]) -> list[int]:
    """`count` tail values (seconds, ascending) on the curve (a-1)x/(a-x) of the maximum,
    whole minutes, moved by 30, 20 or 10 s where they would collide with `used` or each
    other; values that can not be placed are left out."""
    p, q = TAIL_TIME
    a = 1.0 + p * bins ** q
    out: set[int] = set()
    for i in range(1, count + 1):
        x = i / count
        sec = _round(((a - 1) * x / (a - x)) * max_s / 60.0) * 60
        for off in _TAIL_OFFSETS:
            s = sec + off
            if s not in out and s not in used and 0 < s < max_s:
                out.add(s)
                break
    return sorted(out)


def tail_shares(count: int, head_share: float) -> list[float]:
    """Shares of popularity ranks 21.., scaled to the share the head leaves."""
    a, b = TAIL_SIZE
    raw = [a * float(TOP + 1 + i) ** b for i in range(count)]
    total = sum(raw)
    return [r * (1.0 - head_share) / total for r in raw] if total > 0 else []


@dataclass(frozen=True, kw_only=True)
class Histogram:
    """The values users ask for (seconds, ascending) and the share of jobs asking for each."""

    times: tuple[float, ...]
    shares: tuple[float, ...]
    cumulative: tuple[float, ...]
    """cumulative[i]: the shares of times[:i] (one entry more than times)."""

    @classmethod
    def of(cls, pairs: dict[int, float]) -> Histogram:
        times = tuple(sorted(pairs))
        shares = tuple(pairs[t] for t in times)
        total = sum(shares)
        shares = tuple(s / total for s in shares)
        cum = [0.0]
        for s in shares:
            cum.append(cum[-1] + s)
        return cls(times=tuple(float(t) for t in times), shares=shares, cumulative=tuple(cum))

    def draw(self, run_time: float, u: float) -> float | None:
        """The value a job of `run_time` asks for, given a uniform `u` in [0, 1): one of the
        values >= run_time, in proportion to their shares; None when the run time is longer
        than every value."""
        lo = bisect.bisect_left(self.times, run_time)
        if lo == len(self.times):
            return None
        base = self.cumulative[lo]
        target = base + u * (self.cumulative[-1] - base)
        k = bisect.bisect_right(self.cumulative, target) - 1
        return self.times[min(max(k, lo), len(self.times) - 1)]


@functools.lru_cache(maxsize=64)
def histogram(*, max_s: int, bins: int, head_share: float, max_share: float | None,
              seed: int) -> Histogram:
    """The model's histogram for a partition maximum of `max_s` seconds and `bins` distinct
    values in all; `seed` draws the head's popularity ranks and the tail's matching."""
    if max_s < HOUR:
        raise ValueError(f"the maximum limit must be at least one hour, got {max_s} s")
    rng = random.Random(f"tsafrir05/{seed}")
    times = head_times(max_s)
    shares = head_shares(len(times), max_share, head_share)
    ranks = popularity_ranks(len(times), rng)
    pairs = {t: shares[r - 1] for t, r in zip(times, ranks, strict=True)}
    tail = tail_times(max_s, bins, max(bins - len(times), 0), set(pairs))
    sizes = tail_shares(len(tail), head_share)
    rng.shuffle(tail)
    rng.shuffle(sizes)
    pairs.update(zip(tail, sizes, strict=True))
    return Histogram.of(pairs)


def uniform(seed: int, key: str) -> float:
    """A uniform number in [0, 1) that depends only on the seed and the job's key (the same in
    every process and on every platform)."""
    digest = hashlib.blake2b(f"{seed}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64
