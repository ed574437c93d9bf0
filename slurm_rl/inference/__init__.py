"""Layer-aware DNN inference scheduling with DRM-DQL (docs/inference.md).

profile.py (layer profiles: pure, JSON), models.py + profiler.py (profiles from torch modules),
cluster.py (devices, bandwidth matrix, roofline cost model), sim.py (the inference-task
simulator), features.py, env.py (gymnasium.Env), schedulers.py (heuristics and the DP bound),
dqn.py (DRM-DQL / vanilla DQL), plan.py (one model's placement), experiments.py + report.py and
cli.py (`slurm-rl inference ...`), slurm_plan.py (`slurm-rl plan` inside a Slurm job).
Only models, profiler and dqn import torch; the rest imports dqn only where it loads a checkpoint.
"""
