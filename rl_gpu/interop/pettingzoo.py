"""One world of an rl_gpu environment as a PettingZoo ``ParallelEnv``: ``to_pettingzoo(env)``.

For tools that speak PettingZoo (its API tests, wrappers such as SuperSuit, other libraries' trainers). Agents are
named ``agent_0`` .. ``agent_{M-1}``; every agent's observation and action space is the same as one row of
:func:`~rl_gpu.interop.bridge.single_spaces` gives. The rl_gpu environment resets a finished world itself; here
the step that ends the episode returns where it ended (``final_obs``), every agent leaves ``agents``, and the
next episode starts at ``reset()``, as PettingZoo expects. ``state()`` is the ``critic`` group when the
environment has one (VMAS: every agent's observation), else the observations concatenated.

Turn-based games of several seats (roulette, Leduc) are refused: their seats take turns, which PettingZoo writes
as an ``AECEnv``, not a ``ParallelEnv``. Their seats-as-agents view (``"RussianRoulette-v0?seats_as_agents=1"``) is
one: the seat not to act may send any action. An environment with legal-action masks gives each agent's observation
as PettingZoo's own masked games do, ``{"observation": ..., "action_mask": int8 [A]}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rl_gpu.core.types import VecEnv
from rl_gpu.interop.bridge import single_spaces


class RlGpuParallelEnv(ParallelEnv):
    """World 0 of a one-world rl_gpu batch (``num_envs=1``) behind PettingZoo's ``ParallelEnv`` API."""

    def __init__(self, env: VecEnv) -> None:
        spec = env.spec
        if spec.num_players != 1:
            raise ValueError(f"{type(env).__name__} is a turn-based game of {spec.num_players} seats: PettingZoo "
                             "writes those as an AECEnv, and to_pettingzoo gives a ParallelEnv")
        if env.num_envs != 1:
            raise ValueError(f"to_pettingzoo presents one world: build the environment with num_envs=1 (it has "
                             f"{env.num_envs})")
        self.env = env
        self.spec = spec
        self.possible_agents = [f"agent_{i}" for i in range(spec.num_agents)]
        self.agents: list[str] = []
        obs_space, act_space = single_spaces(env)
        # One space object per agent, the same object every call (PettingZoo's API test checks identity).
        self._masked = bool(spec.has_action_mask) and not spec.is_continuous
        if self._masked:
            obs_space = spaces.Dict({"observation": obs_space,
                                     "action_mask": spaces.Box(0, 1, (spec.num_actions,), np.int8)})
        self._obs_spaces = {a: obs_space for a in self.possible_agents}
        self._act_spaces = {a: act_space for a in self.possible_agents}
        self._obs_dtype = (obs_space["observation"] if self._masked else obs_space).dtype
        self.metadata = {"name": f"rl_gpu:{type(env).__name__}", "render_modes": []}
        self.render_mode = None
        critic = spec.obs_groups.get("critic") if spec.obs_groups else None
        size = int(np.prod(critic)) if critic else spec.num_agents * int(np.prod(spec.obs_shape))
        self.state_space = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self._last = None

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _per_agent(self, x: torch.Tensor) -> np.ndarray:
        """``[M, ...]`` on the host from a ``[1, M, ...]`` (or ``[1, ...]`` for one agent) tensor."""
        x = x[0] if self.spec.num_agents > 1 else x
        return x.detach().cpu().numpy()

    def _observations(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, Any]:
        host = self._per_agent(obs).astype(self._obs_dtype)
        if not self._masked:
            return {a: host[i] for i, a in enumerate(self.possible_agents)}
        legal = self._per_agent(mask).astype(np.int8)
        return {a: {"observation": host[i], "action_mask": legal[i]} for i, a in enumerate(self.possible_agents)}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        step = self.env.reset(seed=seed)
        self._last = step
        self.agents = list(self.possible_agents)
        return self._observations(step.obs, step.action_mask), {a: {} for a in self.agents}

    def _action(self, actions: dict[str, Any]) -> torch.Tensor:
        missing = [a for a in self.agents if a not in actions]
        unknown = [a for a in actions if a not in self.agents]
        if missing or unknown:
            raise ValueError(f"step needs one action per agent in {self.agents}; missing {missing}, unknown "
                             f"{unknown}")
        if self.spec.is_continuous:
            rows = [np.asarray(actions[a], np.float32).reshape(self.spec.action_shape) for a in self.agents]
            action = torch.as_tensor(np.stack(rows))
        else:
            action = torch.as_tensor([int(actions[a]) for a in self.agents], dtype=torch.long)
        action = action.to(self.env.device)
        return action.unsqueeze(0) if self.spec.num_agents > 1 else action

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode has ended (no agents left): call reset() first")
        step = self.env.step(self._action(actions))
        self._last = step
        done = bool(step.done[0])
        # A world that ended has no next move: every action is legal in its last observation.
        obs = self._observations(step.final_obs if done else step.obs,
                                 torch.ones_like(step.action_mask) if done else step.action_mask)
        reward = self._per_agent(step.reward).reshape(-1)
        terminated, truncated = bool(step.terminated[0]), bool(step.truncated[0])
        agents = self.agents
        rewards = {a: float(reward[i]) for i, a in enumerate(self.possible_agents) if a in agents}
        terms = dict.fromkeys(agents, terminated)
        truncs = dict.fromkeys(agents, truncated)
        infos: dict[str, dict] = {a: {} for a in agents}
        if done:
            self.agents = []
        return {a: obs[a] for a in agents}, rewards, terms, truncs, infos

    def state(self) -> np.ndarray:
        step = self._last
        if step is None:
            raise RuntimeError("call reset() before state()")
        if step.critic_obs is not None:
            critic = step.final_critic_obs if bool(step.done[0]) else step.critic_obs
            return critic[0].detach().cpu().numpy().astype(np.float32)
        obs = step.final_obs if bool(step.done[0]) else step.obs
        return obs.reshape(-1).detach().cpu().numpy().astype(np.float32)

    def close(self) -> None:
        self.env.close()


def to_pettingzoo(env: VecEnv | str, **make_kwargs: Any) -> RlGpuParallelEnv:
    """``env`` (a one-world batch, or an id built here with ``num_envs=1`` and ``make_kwargs``) as a PettingZoo
    ``ParallelEnv``."""
    if isinstance(env, str):
        from rl_gpu.envs.registry import make

        env = make(env, num_envs=1, **make_kwargs)
    return RlGpuParallelEnv(env)
