"""policies/rl/scorer.py: the numpy forward the `rl` policy decides with gives torch's scores (the
network as trained) within float32 rounding, on the shipped checkpoint and on random weights."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from slurm_rl.policies.rl import default_checkpoint  # noqa: E402
from slurm_rl.policies.rl.scorer import NumpyScorer  # noqa: E402
from slurm_rl.rl import model as rl_model  # noqa: E402


def _both(net: rl_model.JobScorer, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = rng.normal(0, 1, (n, net.cfg.job_features)).astype(np.float32)
    cluster = rng.normal(0, 1, (net.cfg.cluster_features,)).astype(np.float32)
    with torch.no_grad():
        want = net.scores(torch.from_numpy(rows), torch.from_numpy(cluster)).numpy()
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    got = NumpyScorer.from_state(state, net.cfg.job_features).scores(rows, cluster)
    return want.astype(np.float64), got


@pytest.mark.parametrize("n", [1, 3, 64, 2000])
def test_numpy_scores_equal_torch_on_the_shipped_checkpoint(n: int) -> None:
    net, _ = rl_model.load(default_checkpoint())
    want, got = _both(net, n, seed=n)
    assert got.dtype == np.float64 and got.shape == (n,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # the order they give agrees wherever torch's scores are not within rounding of a tie
    gaps = np.diff(np.sort(want))
    if n > 1 and gaps.min() > 1e-5:
        assert (np.argsort(-got, kind="stable") == np.argsort(-want, kind="stable")).all()


def test_numpy_scores_equal_torch_on_random_weights() -> None:
    torch.manual_seed(0)
    net = rl_model.JobScorer(rl_model.ModelConfig())
    for p in net.parameters():  # larger weights than the init, so tanh saturates somewhere
        p.data.normal_(0, 0.5)
    want, got = _both(net, 500, seed=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_extra_feature_columns_are_ignored_as_torch_does() -> None:
    net, _ = rl_model.load(default_checkpoint())
    rng = np.random.default_rng(2)
    rows = rng.normal(0, 1, (5, net.cfg.job_features + 3)).astype(np.float32)
    cluster = rng.normal(0, 1, (net.cfg.cluster_features,)).astype(np.float32)
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    scorer = NumpyScorer.from_state(state, net.cfg.job_features)
    with torch.no_grad():
        want = net.scores(torch.from_numpy(rows), torch.from_numpy(cluster)).numpy()
    np.testing.assert_allclose(scorer.scores(rows, cluster), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [31, 32, 256, 3000])
def test_scores_do_not_depend_on_the_callers_blas_thread_count(n: int) -> None:
    """From _ONE_THREAD_ROWS rows on, `scores` runs under a one-thread BLAS limit, so its
    result is the same bit for bit whatever thread count numpy's BLAS was given; and it is the
    unlimited product's within float32 rounding (a threaded product may sum in another order,
    so bit-for-bit equality with it is not promised)."""
    from threadpoolctl import threadpool_limits

    net, _ = rl_model.load(default_checkpoint())
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    scorer = NumpyScorer.from_state(state, net.cfg.job_features)
    rng = np.random.default_rng(n)
    rows = rng.normal(0, 1, (n, net.cfg.job_features)).astype(np.float32)
    cluster = rng.normal(0, 1, (net.cfg.cluster_features,)).astype(np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        one = scorer.scores(rows, cluster).tobytes()
    with threadpool_limits(limits=2, user_api="blas"):
        two = scorer.scores(rows, cluster).tobytes()
        free = scorer._forward(rows, cluster)
    assert one == two
    np.testing.assert_allclose(np.frombuffer(one), free, rtol=1e-6, atol=1e-6)
