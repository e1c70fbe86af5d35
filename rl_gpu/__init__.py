"""rl_gpu."""
