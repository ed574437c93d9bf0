"""The `rl` policy's network at decision time, in numpy: `JobScorer.scores` (rl/model.py)
evaluated with the checkpoint's weights, float32 as in training, without torch's per-call
overhead (3x faster for the one to ten rows a preemption check scores, 5x for 10,000; a 100k-job
simulation asks it ~100,000 times). No torch import here: the weights come as arrays
(`from_state`). Equal to torch's scores within float32 rounding (tests/rl/test_scorer.py), not
bit for bit: BLAS libraries sum in different orders.

From `_ONE_THREAD_ROWS` rows on, the products run with numpy's BLAS limited to one thread
(`threadpoolctl`, only around this call): OpenBLAS splits a 256 x 64 product over threads,
and on a busy 2-core host its waiting threads cost 60x the product itself (3.4 ms CPU instead
of 59 us a call, measured). The limit also makes the scores independent of how many threads
numpy's BLAS has: a threaded product may sum in another order (seen in CI: the last bits of
a 256-row call differed from the one-thread call), so without it the same snapshot could
score differently on another host or under another load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

_F32 = npt.NDArray[np.float32]
_ONE_THREAD_ROWS = 32
"""Calls with at least this many rows run under a one-thread BLAS limit (fewer never thread,
and the limit costs ~10 us)."""


@cache
def _blas() -> Any:
    """numpy's BLAS libraries (a threadpoolctl selection), found once."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


@dataclass(frozen=True)
class NumpyScorer:
    """score(job, cluster) = w3 · tanh(W2 · tanh(W1j · job + W1c · cluster + b1) + b2) + b3,
    the weights stored transposed and contiguous for `rows @ W`."""

    w1_job: _F32
    w1_cluster: _F32
    b1: _F32
    w2: _F32
    b2: _F32
    w3: _F32
    b3: np.float32
    job_features: int

    @classmethod
    def from_state(cls, state: Mapping[str, npt.ArrayLike], job_features: int) -> NumpyScorer:
        """From a JobScorer's state_dict as arrays (`embed.0`, `embed.2`, `score`)."""
        def arr(key: str) -> _F32:
            return np.ascontiguousarray(np.asarray(state[key], dtype=np.float32))

        w1 = arr("embed.0.weight")
        return cls(w1_job=np.ascontiguousarray(w1[:, :job_features].T),
                   w1_cluster=np.ascontiguousarray(w1[:, job_features:].T),
                   b1=arr("embed.0.bias"), w2=np.ascontiguousarray(arr("embed.2.weight").T),
                   b2=arr("embed.2.bias"), w3=np.ascontiguousarray(arr("score.weight")[0]),
                   b3=arr("score.bias")[0], job_features=job_features)

    def scores(self, rows: npt.NDArray[np.float32], cluster: npt.NDArray[np.float32],
               ) -> npt.NDArray[np.float64]:
        """rows (N, >= job_features) of the jobs, cluster (C,) -> their scores (N,), float64."""
        if len(rows) >= _ONE_THREAD_ROWS:
            with _blas().limit(limits=1):
                return self._forward(rows, cluster)
        return self._forward(rows, cluster)

    def _forward(self, rows: npt.NDArray[np.float32], cluster: npt.NDArray[np.float32],
                 ) -> npt.NDArray[np.float64]:
        # np.dot: the BLAS calls `@` makes, bit for bit (checked for 1-3,000 rows), at about
        # half its Python-level cost (what matters at one to ten rows)
        dot = np.dot
        if rows.shape[1] != self.job_features:
            rows = rows[:, :self.job_features]
        h = dot(rows, self.w1_job)
        h += dot(cluster, self.w1_cluster) + self.b1
        np.tanh(h, out=h)
        h2 = dot(h, self.w2)
        h2 += self.b2
        np.tanh(h2, out=h2)
        s = dot(h2, self.w3)
        s += self.b3
        return s.astype(np.float64)
