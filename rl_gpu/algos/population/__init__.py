"""Populations: K independent PPO runs trained at once in one process (stacked parameters, one batched call per
layer), and population-based training over their hyper-parameters."""
