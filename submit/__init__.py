"""rlsbatch: the sbatch replacement (installed as slurm_rl.submit)."""
