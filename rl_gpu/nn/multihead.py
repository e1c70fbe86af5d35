"""Multi-head policies for batches of several tasks: one trunk shared by every task, one output layer per task,
chosen by the task one-hot that ends the observation (:mod:`rl_gpu.envs.multitask`).

A head is one linear layer of ``hidden -> actions``; all K are one ``hidden -> K * actions`` layer, and the row's
task picks its slice (a gather: the same cost for any K, exportable to ONNX). Training one task moves the trunk and
that task's head only, so the other tasks' heads stay as their own training left them: the multi-head method
against forgetting. The critic is the plain one (it reads the one-hot too).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic
from rl_gpu.nn.layers import hidden_layers, layer_init


class TaskHeads(nn.Module):
    """``x [..., O] -> [..., out]``: a tanh trunk, then the head of the task whose one-hot ends ``x`` (the largest
    of the last K entries: still the task's after observation normalisation, which keeps each column's order)."""

    def __init__(self, in_size: int, hidden_sizes: Sequence[int], out_size: int, num_tasks: int) -> None:
        super().__init__()
        if num_tasks < 1 or num_tasks >= in_size:
            raise ValueError(f"a multi-head policy needs 1 to {in_size - 1} tasks, got {num_tasks}")
        layers, size = hidden_layers(in_size, hidden_sizes)
        self.trunk = nn.Sequential(*layers)
        self.heads = layer_init(nn.Linear(size, out_size * num_tasks), gain=0.01)
        self.num_tasks, self.out_size = num_tasks, out_size

    def forward(self, x: Tensor) -> Tensor:
        out = self.heads(self.trunk(x)).unflatten(-1, (self.num_tasks, self.out_size))
        task = x[..., -self.num_tasks:].argmax(-1)
        index = task[..., None, None].expand(*task.shape, 1, self.out_size)
        return torch.gather(out, -2, index).squeeze(-2)


class MultiHeadActorCritic(ActorCritic):
    """The masked categorical actor-critic with one actor head per task."""

    def __init__(self, obs_dim: int, num_actions: int, num_tasks: int, hidden_sizes: Sequence[int] = (64, 64),
                 normalize_obs: bool = False, critic_obs_dim: int = 0) -> None:
        super().__init__(obs_dim, num_actions, hidden_sizes, normalize_obs, critic_obs_dim)
        self.num_tasks = num_tasks
        self.actor = TaskHeads(obs_dim, hidden_sizes, num_actions, num_tasks)

    def config(self) -> dict:
        return {**super().config(), "kind": "multihead", "num_tasks": self.num_tasks}


class MultiHeadGaussianActorCritic(GaussianActorCritic):
    """The diagonal Gaussian actor-critic with one mean head per task (one log-std for all)."""

    def __init__(self, obs_dim: int, action_dim: int, num_tasks: int, hidden_sizes: Sequence[int] = (64, 64),
                 init_log_std: float = 0.0, normalize_obs: bool = False, critic_obs_dim: int = 0) -> None:
        super().__init__(obs_dim, action_dim, hidden_sizes, init_log_std, normalize_obs, critic_obs_dim=critic_obs_dim)
        self.num_tasks = num_tasks
        self.actor = TaskHeads(obs_dim, hidden_sizes, action_dim, num_tasks)

    def config(self) -> dict:
        return {**super().config(), "kind": "multihead_gaussian", "num_tasks": self.num_tasks}


def multihead_for_env(spec, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False,
                      init_log_std: float = 0.0) -> nn.Module:
    """``--policy multihead``: one head per task of a multi-task batch (``multitask:`` ids)."""
    if spec.num_tasks < 1:
        raise ValueError("--policy multihead takes a batch of several tasks whose observation ends with the task's "
                         "one-hot (a multitask: id); this environment has none")
    critic = spec.critic_obs_size
    if spec.is_continuous:
        return MultiHeadGaussianActorCritic(spec.obs_size, spec.action_size, spec.num_tasks, hidden_sizes,
                                            init_log_std, normalize_obs, critic)
    return MultiHeadActorCritic(spec.obs_size, spec.num_actions, spec.num_tasks, hidden_sizes, normalize_obs, critic)
