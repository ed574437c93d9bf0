"""slurm-rl: deadline- and QoS-aware scheduling of deep-learning jobs on Slurm GPU clusters.

Kept import-light on purpose: `rlsbatch` imports `slurm_rl.core` and `slurm_rl.submit`, and must
not pull in torch or SQLAlchemy.
"""

__version__ = "0.1.0"
