"""Loading a trained policy from a checkpoint, ready to act: :func:`load` (``rl_gpu.load``: a
:class:`LoadedPolicy` that takes tensors or numpy arrays) on :func:`~rl_gpu.nn.rebuild.load_policy` (the network,
rebuilt and checked against its architecture, and the checkpoint's payload).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.core.device import check_device
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.nn.rebuild import load_policy, rebuild_policy  # noqa: F401 -- the names callers import from here

class LoadedPolicy:
    """A checkpoint's policy, ready to act: ``act(obs, mask=None, deterministic=True)`` -> actions.

    Attributes: ``policy`` (the ``nn.Module``, eval mode), ``env_id`` (what it was trained on), ``device``,
    ``checkpoint`` (the file), ``payload`` (all the checkpoint holds: ``update``, ``config``, ...),
    ``obs_dim``, ``is_continuous`` and ``num_actions`` (discrete) or ``action_dim`` (continuous).
    """

    def __init__(self, policy: nn.Module, payload: dict, checkpoint: Path, device: torch.device,
                 check_inputs: bool = True) -> None:
        self.policy = policy
        self.check_inputs = check_inputs
        """Refuse non-finite observations (naming the rows); False skips the check (one host read per call)."""
        self.payload = payload
        self.checkpoint = checkpoint
        self.device = device
        self.env_id: str | None = payload.get("env_id")
        self.obs_dim = int(policy.obs_dim)
        self.obs_shape = tuple(getattr(policy, "obs_shape", (self.obs_dim,)))
        """One observation's shape (``[obs_dim]`` for flat ones); ``act`` takes ``[N, *obs_shape]`` too."""
        self.is_continuous = bool(policy.is_continuous)
        self.is_recurrent = is_recurrent(policy)
        """The policy has memory: it acts through :meth:`act_with_state`."""
        self.num_actions = None if self.is_continuous else int(policy.num_actions)
        self.action_dim = int(policy.action_dim) if self.is_continuous else None
        self.num_agents = int(policy.num_agents) if callable(getattr(policy, "agent", None)) else None
        """A policy with one network per agent: ``act`` takes ``[N, M, O]`` observations (or ``[M, O]``), agent m's
        network acting on ``[:, m]``, and returns ``[N, M]`` (``[N, M, D]``) actions."""

    def __repr__(self) -> str:
        actions = f"action_dim={self.action_dim}" if self.is_continuous else f"num_actions={self.num_actions}"
        return (f"LoadedPolicy(env_id={self.env_id!r}, obs_dim={self.obs_dim}, {actions}, "
                f"checkpoint='{self.checkpoint}', device={self.device})")

    def _tensor(self, value: Any, name: str, dtype: torch.dtype, size: int) -> tuple[Tensor, bool]:
        try:
            tensor = torch.as_tensor(value, device=self.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"{name} must be a tensor or array of numbers ({str(e).strip()[:120]})") \
                from None
        if dtype == torch.bool and tensor.dtype != torch.bool:
            raise ValueError(f"{name} must be bool (True = legal), got {tensor.dtype}")
        if tensor.is_complex():
            raise ValueError(f"{name} must be real numbers, got {tensor.dtype}")
        shape = self.obs_shape if name == "obs" else (size,)
        if len(shape) > 1 and tensor.ndim >= len(shape) and tuple(tensor.shape[tensor.ndim - len(shape):]) == shape:
            tensor = tensor.reshape(*tensor.shape[:tensor.ndim - len(shape)], size)   # frames, flattened
        if tensor.ndim not in (1, 2) or tensor.shape[-1] != size:
            raise ValueError(f"{name} must have shape [N, {size}] or [{size}], got {list(tensor.shape)}")
        return tensor.to(dtype), tensor.ndim == 1

    @torch.no_grad()
    def act(self, obs: Any, mask: Any = None, deterministic: bool = True,
            generator: torch.Generator | None = None) -> Any:
        """Actions for observations ``obs`` (``[N, O]`` or one ``[O]``, or ``[N, *obs_shape]`` frames; a tensor, a
        numpy array or a list; bool observations count as 0 and 1).

        ``mask`` (discrete policies, ``[N, A]`` or ``[A]``, True = legal) restricts the choice to legal
        actions. ``deterministic``: the most probable action (the Gaussian's mean for continuous actions),
        else a sample drawn with ``generator``. Returns ``[N]`` int64 (discrete) or ``[N, D]`` float32
        actions, ``[]`` / ``[D]`` for one observation, as a numpy array when ``obs`` is one, else a tensor on
        ``device``. A policy with memory acts through :meth:`act_with_state`.
        """
        if self.is_recurrent:
            raise ValueError("this policy has memory: act_with_state(obs, state) gives the actions and the next "
                             "state, starting from initial_state(N)")
        if self.num_agents is not None:
            return self._act_per_agent(obs, mask, deterministic, generator)
        x, mask, single, as_numpy = self._inputs(obs, mask, deterministic)
        return self._output(self.policy.act(x, mask, generator, deterministic).action, single, as_numpy)

    def _act_per_agent(self, obs: Any, mask: Any, deterministic: bool, generator: torch.Generator | None) -> Any:
        """:meth:`act` for a policy with one network per agent: ``[N, M, O]`` or ``[M, O]`` observations (and
        masks ``[N, M, A]`` or ``[M, A]``) as agent-minor rows."""
        as_numpy = type(obs).__module__ == "numpy"
        m = self.num_agents
        try:
            x = torch.as_tensor(obs, device=self.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"obs must be a tensor or array of numbers ({str(e).strip()[:120]})") from None
        if x.ndim not in (2, 3) or tuple(x.shape[-2:]) != (m, self.obs_dim):
            raise ValueError(f"this policy has one network per agent: obs must have shape [N, {m}, {self.obs_dim}] "
                             f"(world, agent, observation) or [{m}, {self.obs_dim}], got {list(x.shape)}")
        worlds = x.shape[:-2]
        if mask is not None:
            mask = torch.as_tensor(mask, device=self.device)
            if tuple(mask.shape[:-1]) != (*worlds, m):
                raise ValueError(f"mask must have shape [{', '.join(map(str, (*worlds, m)))}, A] like obs, got "
                                 f"{list(mask.shape)}")
            mask = mask.reshape(-1, mask.shape[-1])
        rows, mask, _, _ = self._inputs(x.reshape(-1, self.obs_dim), mask, deterministic)
        action = self.policy.act(rows, mask, generator, deterministic).action
        action = action.reshape(*worlds, m, *action.shape[1:])
        return action.cpu().numpy() if as_numpy else action

    @torch.no_grad()
    def act_with_state(self, obs: Any, state: Tensor, mask: Any = None, deterministic: bool = True,
                       generator: torch.Generator | None = None) -> tuple[Any, Tensor]:
        """A policy with memory: ``(actions, next state)`` for observations seen in ``state`` (``[N, ...]``:
        :meth:`initial_state` for fresh episodes, else the previous call's; set a row back to the initial state
        when its episode ends); otherwise as :meth:`act`."""
        if not self.is_recurrent:
            raise ValueError("this policy has no memory: use act(obs)")
        x, mask, single, as_numpy = self._inputs(obs, mask, deterministic)
        want = tuple(self.initial_state(x.shape[0]).shape)
        try:
            state = torch.as_tensor(state, device=self.device)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"state must be a tensor or array of numbers, got {type(state).__name__}") from None
        if tuple(state.shape) != want or state.dtype == torch.bool or state.is_complex():
            raise ValueError(f"state must be real numbers of shape {list(want)} (initial_state({x.shape[0]}) or the "
                             f"previous call's), got {state.dtype} {list(state.shape)}")
        state = state.to(torch.float32)
        if self.check_inputs and not bool(torch.isfinite(state).all()):
            raise ValueError("state has NaN or infinite values; an action from it would be meaningless "
                             "(rl_gpu.load(..., check_inputs=False) skips this check)")
        out, after = self.policy.act_with_state(x, state, mask, generator, deterministic)
        return self._output(out.action, single, as_numpy), after

    @torch.no_grad()
    def probabilities(self, obs: Any, mask: Any = None) -> Any:
        """A discrete policy's probability of each action, ``[N, A]`` (``[A]`` for one observation), illegal
        actions (``mask`` False) 0: the distribution :meth:`act` samples from, for computing exploitability or
        mixing strategies. Inputs and outputs as :meth:`act`."""
        if self.is_continuous:
            raise ValueError("a continuous policy has a density over actions, not action probabilities")
        if self.is_recurrent or self.num_agents is not None:
            raise ValueError("probabilities are given for feed-forward policies shared by every row")
        x, mask, single, as_numpy = self._inputs(obs, mask, False)
        rows = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        probs = torch.stack([self.policy.evaluate(x, rows + a, mask)[0].exp() for a in range(self.num_actions)], 1)
        if mask is not None:
            probs = torch.where(mask, probs, 0.0)
        return self._output(probs, single, as_numpy)

    def initial_state(self, num_envs: int) -> Tensor:
        """A policy with memory: the state of ``num_envs`` fresh episodes."""
        if not self.is_recurrent:
            raise ValueError("this policy has no memory: it has no state")
        return self.policy.initial_state(num_envs)

    def _inputs(self, obs: Any, mask: Any, deterministic: bool) -> tuple[Tensor, Tensor | None, bool, bool]:
        """``(obs [N, O], mask [N, A] or None, one observation given, obs is a numpy array)``, checked."""
        if not isinstance(deterministic, bool):
            raise ValueError(f"deterministic must be True or False, got {deterministic!r}")
        as_numpy = type(obs).__module__ == "numpy"
        x, single = self._tensor(obs, "obs", torch.float32, self.obs_dim)
        x = x.reshape(-1, self.obs_dim)
        if self.check_inputs:
            bad = ~torch.isfinite(x).all(-1)
            if bool(bad.any()):
                rows = bad.nonzero().flatten().tolist()
                raise ValueError(f"obs has NaN or infinite values in row{'s' if len(rows) > 1 else ''} "
                                 f"{', '.join(map(str, rows[:8]))}{', ...' if len(rows) > 8 else ''}; a policy's "
                                 "action for them would be meaningless (rl_gpu.load(..., check_inputs=False) skips "
                                 "this check)")
        if mask is not None:
            if self.is_continuous:
                raise ValueError("mask applies to discrete actions; this policy's actions are continuous")
            m, _ = self._tensor(mask, "mask", torch.bool, self.num_actions)
            m = m.reshape(-1, self.num_actions)
            if m.shape[0] not in (1, x.shape[0]):
                raise ValueError(f"mask has {m.shape[0]} rows, obs has {x.shape[0]}")
            if not bool(m.any(-1).all()):
                raise ValueError("mask allows no action in some row")
            mask = m.expand(x.shape[0], -1)
        return x, mask, single, as_numpy

    @staticmethod
    def _output(action: Tensor, single: bool, as_numpy: bool) -> Any:
        if single:
            action = action[0]
        return action.cpu().numpy() if as_numpy else action

    __call__ = act


def load(checkpoint: str | Path, device: torch.device | str = "cpu", check_inputs: bool = True) -> LoadedPolicy:
    """``rl_gpu.load``: the policy of a checkpoint written by ``rl-gpu train`` (``best.pt`` or ``last.pt``),
    ready to act. Raises :class:`~rl_gpu.runtime.checkpoint.CheckpointError` (a ``ValueError``, one line)
    for a file that holds no usable policy. Nothing in the file is executed (weights-only loading), and its
    environment is not built. ``device``: the CPU or a visible CUDA device (``ValueError`` naming what is
    visible otherwise). ``check_inputs``: ``act`` refuses non-finite observations (False skips that check)."""
    if not isinstance(check_inputs, bool):
        raise ValueError(f"check_inputs must be True or False, got {check_inputs!r}")
    device = check_device(device)
    policy, payload = load_policy(checkpoint, device)
    return LoadedPolicy(policy, payload, Path(checkpoint), device, check_inputs)
