"""The `rl` policy (policies/rl/): checkpoint round trip with weights_only=True, one clear
RLPolicyError line for a missing or corrupt checkpoint and for a network that returns NaN, and
the same Decision as the env's decision_from_scores."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from slurm_rl import policies  # noqa: E402
from slurm_rl.core import (  # noqa: E402
    ClusterSnapshot,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
)
from slurm_rl.policies.rl import RLPolicyError, default_checkpoint  # noqa: E402
from slurm_rl.policies.rl.action import decision_from_scores  # noqa: E402
from slurm_rl.policies.rl.features import FeatureConfig, features  # noqa: E402
from slurm_rl.rl import model as rl_model  # noqa: E402


def _snap() -> ClusterSnapshot:
    jobs = tuple(JobView(id=JobId(str(i)), state=JobState.PENDING, submit_time=float(i),
                         gpus=1 + i % 4, attained_gpu_s=float(100 * (i % 3)))
                 for i in range(1, 9))
    return ClusterSnapshot(time=100.0, jobs=jobs, nodes=NODES)


NODES = tuple(NodeView(name=NodeName(f"n{i}"), state=NodeState.MIXED, gpus_total=4,
                       gpus_alloc=4 - i) for i in range(2))


def _net(seed: int = 0) -> rl_model.JobScorer:
    torch.manual_seed(seed)
    net = rl_model.JobScorer(rl_model.ModelConfig(hidden=16, max_jobs=8))
    torch.nn.init.normal_(net.score.weight)  # scores that differ between jobs
    return net


def test_checkpoint_round_trip_with_weights_only(tmp_path: Path) -> None:
    net = _net()
    path = tmp_path / "ck.pt"
    rl_model.save(net, path, {"note": "x"})
    blob = torch.load(path, weights_only=True)
    assert blob["config"]["hidden"] == 16 and blob["meta"] == {"note": "x"}
    back, meta = rl_model.load(path)
    for k, v in net.state_dict().items():
        assert torch.equal(v, back.state_dict()[k])
    s = _snap()
    d = policies.make("rl", checkpoint=str(path)).decide(s)
    f = features(s, FeatureConfig(max_jobs=8))
    with torch.no_grad():
        scores = net.scores(torch.from_numpy(f.job_feats[:8]), torch.from_numpy(f.cluster_feats))
    assert d == decision_from_scores(s, f.shown_ids, scores.numpy())
    assert d == policies.make("rl", checkpoint=str(path)).decide(s)  # deterministic


def test_the_shipped_checkpoint_loads_and_is_small() -> None:
    assert default_checkpoint().stat().st_size < 300_000
    assert len(policies.make("rl").decide(_snap()).order) == 8


@pytest.mark.parametrize("content", [None, b"not a checkpoint", b""])
def test_a_missing_or_corrupt_checkpoint_is_one_clear_line(tmp_path: Path,
                                                           content: bytes | None) -> None:
    path = tmp_path / "bad.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RLPolicyError) as err:
        policies.make("rl", checkpoint=str(path))
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "does not load" in msg


def test_a_checkpoint_of_something_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(RLPolicyError, match="not a slurm-rl checkpoint"):
        policies.make("rl", checkpoint=str(path))


def test_a_network_returning_nan_raises(tmp_path: Path) -> None:
    net = _net()
    with torch.no_grad():
        net.score.bias.fill_(float("nan"))
    path = tmp_path / "nan.pt"
    rl_model.save(net, path)
    policy = policies.make("rl", checkpoint=str(path))
    with pytest.raises(RLPolicyError, match="non-finite") as err:
        policy.decide(_snap())
    assert "\n" not in str(err.value)


def test_an_empty_queue_is_an_empty_order() -> None:
    s = ClusterSnapshot(time=0.0, jobs=(), nodes=NODES)
    assert policies.make("rl").decide(s).order == ()


def test_a_checkpoint_with_fewer_job_features_reads_the_leading_columns(tmp_path: Path) -> None:
    # Columns are only ever appended to features.JOB_FEATURES: a network trained before a
    # column was added reads the columns it knew (rl/model.py), so older checkpoints still load.
    from slurm_rl.policies.rl.features import N_JOB_FEATURES

    torch.manual_seed(1)
    old = rl_model.JobScorer(rl_model.ModelConfig(hidden=16, max_jobs=8,
                                                  job_features=N_JOB_FEATURES - 3))
    torch.nn.init.normal_(old.score.weight)
    path = tmp_path / "old.pt"
    rl_model.save(old, path)
    s = _snap()
    f = features(s, FeatureConfig(max_jobs=8))
    with torch.no_grad():
        want = old.score(old.embed(torch.cat(
            [torch.from_numpy(f.job_feats[:8, :N_JOB_FEATURES - 3]),
             torch.from_numpy(f.cluster_feats).expand(8, -1)], -1))).squeeze(-1)
    d = policies.make("rl", checkpoint=str(path)).decide(s)
    assert d == decision_from_scores(s, f.shown_ids, want.numpy())


@pytest.mark.parametrize("kind", ["fifo", "symlink", "world-writable", "other-owner", "huge"])
def test_an_unsafe_checkpoint_path_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    """The daemon runs as root: a checkpoint path replaced by a FIFO must not hang it (before:
    the SIGHUP reload blocked on the read forever), and a file someone else can write is not
    believed, as the database is not."""
    import os

    good = tmp_path / "good.pt"
    rl_model.save(_net(), good)
    path = tmp_path / f"{kind}.pt"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(good)
    elif kind == "world-writable":
        path.write_bytes(good.read_bytes())
        path.chmod(0o666)
    elif kind == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        path.write_bytes(good.read_bytes())
        os.chown(path, 65534, -1)
    else:
        with path.open("wb") as f:
            f.truncate(65 * 2**20)  # sparse: nothing is written
    with pytest.raises(RLPolicyError, match="does not load") as err:
        policies.make("rl", checkpoint=str(path))
    assert "\n" not in str(err.value)
    want = {"fifo": "not a regular file", "symlink": "symbolic link",
            "world-writable": "writable by group or others", "other-owner": "owned by uid 65534",
            "huge": "more than a checkpoint may have"}[kind]
    assert want in str(err.value)
    policies.make("rl", checkpoint=str(good))  # the same content at a safe path loads
