"""The data split for every learned or fitted policy: the ITP clusters that may build tables
or train (`TRAINING`), and the ones kept for evaluation only (`HELD_OUT`). Fixed here, in one
place, for the Gittins table, the RL trainer and the evaluation alike.
"""

from __future__ import annotations

TRAINING: tuple[str, ...] = ("01", "03", "05", "06", "08")
"""ITP clusters (slurm_rl/data/traces/itp-deadline-clusterNN.csv) tables and training use."""
HELD_OUT: tuple[str, ...] = ("02", "04", "09", "10")
"""ITP clusters never used to build or train anything: evaluation only."""
TRAINING_TRACES: tuple[str, ...] = tuple(f"data:itp-deadline-cluster{c}.csv" for c in TRAINING)
