"""Reinforcement learning over the simulator: `features` (observation and action -> Decision,
pure numpy, shared with the live `rl` policy) and `env` (the gymnasium environment; imports
gymnasium, so nothing on the daemon's or rlsbatch's path imports it)."""
