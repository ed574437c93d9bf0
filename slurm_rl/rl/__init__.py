"""The trainer side of reinforcement learning over the simulator: `env` (the gymnasium
environment; imports gymnasium, so nothing on the daemon's or rlsbatch's path imports it),
`rollout`, `train`, `scenarios` and `fromdb`. What the live `rl` policy runs (features, action,
scorer, checkpoint loading) is `slurm_rl.policies.rl`, which this side imports and never the
other way."""
