"""The trainer behind `slurm-rl train` (its command line is rl/cli.py): PPO over
`SchedulingEnv`, CleanRL's ppo_continuous_action read top to bottom (docs/rl.md, "Agent"):
config -> seeding -> scenarios -> network -> imitation warm start -> loop (rollouts through an
executor: local processes or Slurm jobs, slurm_rl/executor.py; GAE, clipped PPO epochs,
periodic validation, best checkpoint kept) -> learning curve (CSV + PNG). `--from-db DB --init
CKPT` fine-tunes a checkpoint on the jobs the daemon recorded (rl/fromdb.py; docs/rl.md,
"Update scheme on a live cluster").

The scenarios file (TOML; docs/rl/train.toml is the shipped checkpoint's): `[train]` (any
TrainConfig field), `[[scenario]]` and `[[validation]]` tables, read and checked whole before
any work starts (rl/scenarios.py). Nothing is written until training has ended: the best
validated checkpoint and the curve are renamed into place together (`_write_outputs`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from slurm_rl.executor import LocalRunner, TaskRunner
from slurm_rl.rl import model as rl_model
from slurm_rl.rl import rollout
from slurm_rl.rl.config import TrainConfig
from slurm_rl.rl.env import Scenario
from slurm_rl.rl.model import JobScorer, ModelConfig, save


def train(cfg: TrainConfig, scenarios: tuple[Scenario, ...], validation: tuple[Scenario, ...],
          out: Path, echo: Any = print, *, runner: TaskRunner | None = None,
          init: Path | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train; write the best validated checkpoint to `out`, the curve to out.with_suffix
    ('.csv'/'.png'), all three once training has ended (nothing if it fails). Returns a
    summary (best validation return, seconds, ...).

    `runner` runs the rollouts and validation episodes (slurm_rl/executor.py; default:
    `cfg.workers` local processes, closed at the end; a given one is the caller's to close).
    `init`: start from this checkpoint's network (its ModelConfig wins over cfg's; no
    imitation) instead of fresh weights; iteration 0 then validates it unchanged, so the kept
    checkpoint is never worse on validation. `meta` is added to the checkpoint's meta."""
    t0 = time.time()
    _seed(cfg.seed)
    net = _network(cfg, init, echo)
    imitation = cfg.imitation_epochs if init is None else 0
    if init is not None and cfg.imitation_epochs > 0:
        echo("no imitation warm start: the network comes from --init")
    extra = {"train": dataclasses.asdict(cfg), **({"init": str(init)} if init else {}),
             **(meta or {})}
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate, eps=1e-5)
    pool = runner or LocalRunner(cfg.workers)
    work = _Rollouts(cfg=cfg, net=net, pool=pool, scenarios=scenarios, validation=validation)
    rows: list[dict[str, Any]] = []
    steps = 0
    try:  # (the order of every seeded draw is the order of the steps below)
        refs, untrained = work.references()
        echo("validation references (return = -avg JCT h; orders without preemption): "
             + ", ".join(f"{r} {v:.5g}" for r, v in refs.items()))
        echo(f"initial weights: val {untrained[0]:.5g}")
        best, per_family = untrained
        if imitation > 0:
            loss, states = _imitate(cfg, net, opt, work.batch(cfg.imitation_steps, -1),
                                    imitation)
            echo(f"imitation: {imitation} epochs on {states} states, loss {loss:.4f}")
            best, per_family = work.validate()
        kept = (_copy(net), {"iteration": 0, "val_return": best, **extra})
        blank = {f"val_{f}": "" for f in work.families()}
        rows.append({"iteration": 0, "steps": 0, "wall_s": round(time.time() - t0, 1),
                     "train_return": "", "val_return": best,
                     **{f"val_{f}": v for f, v in per_family.items()},
                     **{f"ref_{k}": v for k, v in refs.items()}})
        echo(f"iter 0: val {best:.5g}{_by_family(per_family)}")
        for it in range(1, cfg.iterations + 1):
            for g in opt.param_groups:  # (the step size annealed linearly to 0)
                g["lr"] = cfg.learning_rate * (1.0 - (it - 1) / cfg.iterations)
            b = work.batch(cfg.steps_per_worker, it)
            steps += len(b["rewards"])
            pg, v_loss = _ppo_update(cfg, net, opt, b)
            row = {"iteration": it, "steps": steps, "wall_s": round(time.time() - t0, 1),
                   "train_return": _mean_or_blank(b["ep_returns"]), "val_return": "", **blank,
                   **{f"ref_{k}": v for k, v in refs.items()}}
            tr = "-" if row["train_return"] == "" else f"{row['train_return']:.5g}"
            line = (f"iter {it}/{cfg.iterations}: steps {steps}, episodes "
                    f"{len(b['ep_returns'])}, train return {tr}, pg {pg:.4f}, v {v_loss:.5f}, "
                    f"log_std {net.log_std.item():.2f}")
            if it % cfg.validate_every == 0 or it == cfg.iterations:
                val, per_family = work.validate()
                row["val_return"] = val
                row.update({f"val_{f}": v for f, v in per_family.items()})
                line += f", val {val:.5g}{_by_family(per_family)}"
                if val > best:
                    best = val
                    kept = (_copy(net), {"iteration": it, "val_return": val, **extra})
                    line += " (best)"
            rows.append(row)
            echo(f"{line}  [{row['wall_s']:.0f} s]")
    finally:
        if runner is None:
            pool.close()
    _write_outputs(net.cfg, *kept, rows, out)
    return {"best_val_return": best, "wall_s": time.time() - t0, "steps": steps, "refs": refs,
            "untrained_val_return": untrained[0], "initial_val_return": rows[0]["val_return"]}


def _by_family(per_family: dict[str, float]) -> str:
    """' (fam a, fam b)' for the log line; nothing with a single family."""
    if len(per_family) < 2:
        return ""
    return " (" + ", ".join(f"{f} {v:.5g}" for f, v in per_family.items()) + ")"


def _copy(net: JobScorer) -> dict[str, torch.Tensor]:
    """The network's weights as they are now (kept while training goes on)."""
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _write_outputs(cfg: ModelConfig, state: dict[str, torch.Tensor], meta: dict[str, Any],
                   rows: list[dict[str, Any]], out: Path) -> None:
    """The checkpoint (`state` with its `cfg` and `meta`) and its curve (.csv, .png), written
    into a temporary folder next to `out` and renamed into place once all three are whole: a
    run that fails, here or before, leaves none of them and no folder it made."""
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        net = JobScorer(cfg)
        net.load_state_dict(state)
        save(net, tmp / out.name, meta)
        _write_curve(rows, tmp / out.name)
        for suffix in (out.suffix, ".csv", ".png"):
            os.replace(tmp / out.with_suffix(suffix).name, out.with_suffix(suffix))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:  # (deepest first)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    tmp.rmdir()


def _mean_or_blank(returns: np.ndarray) -> float | str:
    """The mean of the episodes' returns ("" where no episode ended: the curve's blank)."""
    return float(returns.mean()) if len(returns) else ""


def _seed(seed: int) -> None:
    """Seed python, numpy and torch (the rollouts get their own seeds from it: `_Rollouts`)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)


def _network(cfg: TrainConfig, init: Path | None, echo: Any) -> JobScorer:
    """The network to train: `init`'s (its own ModelConfig), else fresh weights from cfg."""
    if init is not None:
        net, _ = rl_model.load(init)
        net.train()
        echo(f"initial weights from {init} (hidden {net.cfg.hidden}, "
             f"max_jobs {net.cfg.max_jobs})")
        return net
    return JobScorer(ModelConfig(hidden=cfg.hidden, max_jobs=cfg.max_jobs,
                                 init_log_std=cfg.init_log_std))


@dataclass(frozen=True, kw_only=True)
class _Rollouts:
    """What the workers run for the trainer (`rollout.run_task`, through `pool`): batches of
    sampled decision points and validation episodes, each with a copy of `net`'s weights."""

    cfg: TrainConfig
    net: JobScorer
    pool: TaskRunner
    scenarios: tuple[Scenario, ...]
    validation: tuple[Scenario, ...]

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def _episodes(self, state: dict[str, torch.Tensor] | None, ranking: str
                  ) -> list[tuple[Any, ...]]:
        mdict = rollout.config_dict(self.net.cfg)
        return [("evaluate_episode", mdict, state, sc, ranking) for sc in self.validation]

    def batch(self, steps: int, it: int) -> dict[str, np.ndarray]:
        """`steps` decision points from each worker (seeded by cfg.seed, `it` and the worker),
        with GAE advantages and returns, concatenated."""
        cfg, state, mdict = self.cfg, self._weights(), rollout.config_dict(self.net.cfg)
        parts = self.pool.map(rollout.run_task, [
            ("collect", mdict, state, self.scenarios, steps,
             cfg.seed * 100_003 + it * cfg.workers + w) for w in range(cfg.workers)])
        for p in parts:
            p["adv"], p["ret"] = rollout.gae(p["rewards"], p["values"], p["dones"],
                                             float(p["last_value"]), cfg.gamma, cfg.gae_lambda)
        return {k: np.concatenate([np.atleast_1d(p[k]) for p in parts]) for k in parts[0]}

    def families(self) -> tuple[str, ...]:
        """The validation scenarios' families, in their first order (`Scenario.family`)."""
        return tuple(dict.fromkeys(sc.family for sc in self.validation))

    def _split(self, returns: list[float]) -> tuple[float, dict[str, float]]:
        """(the mean of the validation `returns`, in scenario order; the mean per family)."""
        per = {f: float(np.mean([r for r, sc in zip(returns, self.validation, strict=True)
                                 if sc.family == f])) for f in self.families()}
        return float(np.mean(returns)), per

    def validate(self) -> tuple[float, dict[str, float]]:
        """The mean return of the validation episodes with the network's mean scores, and
        that mean per family."""
        return self._split(self.pool.map(rollout.run_task,
                                         self._episodes(self._weights(), "net")))

    def references(self) -> tuple[dict[str, float], tuple[float, dict[str, float]]]:
        """(mean validation return of fifo, gittins and the imitation teacher's orders, overall
        as "NAME" and per family as "NAME_FAMILY" where there are several families; that of
        the network as it is, as `validate` gives it): one batch of tasks (one job array on
        Slurm)."""
        n = len(self.validation)
        state0 = self._weights()
        names = list(dict.fromkeys(("fifo", "gittins", self.cfg.imitation_teacher)))
        first = self.pool.map(rollout.run_task, [
            *(e for r in names for e in self._episodes(None, r)),
            *self._episodes(state0, "net")])
        refs: dict[str, float] = {}
        for i, r in enumerate(names):
            mean, per = self._split(first[i * n:(i + 1) * n])
            refs[r] = mean
            if len(per) > 1:
                refs.update({f"{r}_{f}": v for f, v in per.items()})
        return refs, self._split(first[len(names) * n:])


def _imitate(cfg: TrainConfig, net: JobScorer, opt: torch.optim.Optimizer,
             b: dict[str, np.ndarray], epochs: int) -> tuple[float, int]:
    """The warm start: regress the mean scores onto the ranking of the teacher column
    (`cfg.imitation_teacher`) over batch `b`, `epochs` times; (the last minibatch's loss, the
    states)."""
    x = [torch.from_numpy(b[k]) for k in ("jobs", "mask", "cluster")]
    target = torch.from_numpy(rollout.imitation_targets(b["jobs"], b["mask"],
                                                        cfg.imitation_teacher))
    for _ in range(epochs):
        for idx in torch.randperm(len(target)).split(cfg.minibatch_size):
            mean, _ = net(x[0][idx], x[1][idx], x[2][idx])
            loss = (((mean - target[idx]) ** 2) * x[1][idx]).sum() / x[1][idx].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return loss.item(), len(target)


def _ppo_update(cfg: TrainConfig, net: JobScorer, opt: torch.optim.Optimizer,
                b: dict[str, np.ndarray]) -> tuple[float, float]:
    """`cfg.update_epochs` PPO epochs over batch `b` in shuffled minibatches: the clipped
    ratio objective, the value loss, the entropy bonus (the log-std); (the last minibatch's
    policy loss, value loss)."""
    t = {k: torch.from_numpy(np.asarray(b[k], np.float32))
         for k in ("jobs", "mask", "cluster", "actions", "logp", "adv", "ret")}
    for _ in range(cfg.update_epochs):
        for idx in torch.randperm(len(t["ret"])).split(cfg.minibatch_size):
            mean, value = net(t["jobs"][idx], t["mask"][idx], t["cluster"][idx])
            logp = rollout.log_prob(mean, net.log_std, t["actions"][idx], t["mask"][idx])
            ratio = (logp - t["logp"][idx]).clamp(-20, 20).exp()
            adv = t["adv"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = torch.max(-adv * ratio,
                           -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            v_loss = 0.5 * ((value - t["ret"][idx]) ** 2).mean()
            loss = pg + cfg.vf_coef * v_loss - cfg.ent_coef * net.log_std
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
            opt.step()
    return pg.item(), v_loss.item()


def _write_curve(rows: list[dict[str, Any]], out: Path) -> None:
    with out.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = [k[4:] for k in rows[0] if k.startswith("val_") and k != "val_return"]
    panels = 1 + (len(families) if len(families) > 1 else 0)
    fig, axes = plt.subplots(1, panels, figsize=(6 + 4 * (panels - 1), 3.5), squeeze=False)
    ax = axes[0][0]
    tr = [(r["steps"], r["train_return"]) for r in rows if r["train_return"] != ""]
    if tr:
        ax.plot(*zip(*tr, strict=True), label="train episodes (sampled)", alpha=0.6)
    refs = [k for k in rows[0] if k.startswith("ref_")
            and not any(k.endswith(f"_{f}") for f in families)]
    _validation_panel(ax, rows, "val_return", [(k, k[4:]) for k in refs], "all validation")
    ax.set_ylabel("return = -avg JCT (h)")
    if panels > 1:
        for ax, f in zip(axes[0][1:], families, strict=True):
            _validation_panel(ax, rows, f"val_{f}", [(f"{k}_{f}", k[4:]) for k in refs], f)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    plt.close(fig)


def _validation_panel(ax: Any, rows: list[dict[str, Any]], column: str,
                      refs: list[tuple[str, str]], title: str) -> None:
    """One panel of the curve: the validation column over decision points, with the
    reference orders' returns as horizontal lines."""
    va = [(r["steps"], r[column]) for r in rows if r[column] != ""]
    ax.plot(*zip(*va, strict=True), "o-", label="validation (mean scores)")
    for (k, name), style in zip(refs, (":", "--", "-."), strict=False):
        ax.axhline(rows[0][k], ls=style, color="grey", label=f"{name} order")
    ax.set_xlabel("decision points")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
