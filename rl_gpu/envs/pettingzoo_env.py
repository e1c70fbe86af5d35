"""A user's PettingZoo ``ParallelEnv`` as a batch of worlds: ``from_pettingzoo(parallel_env_fn, num_envs)``.

PettingZoo (``pip install 'rl-gpu[pettingzoo]'``) is the ecosystem's multi-agent API; its environments step one
world at a time in Python on the host. This adapter builds N of them and steps them in a loop, so that a policy
and its rollout stay on the device: what crosses is one packed copy of the step's arrays each way.

- ``obs`` ``[N, M, O]`` (M = ``len(possible_agents)``, in that order), ``reward`` ``[N, M]``, ``action``
  ``[N, M]`` (``Discrete``) or ``[N, M, D]`` (``Box``), ``episode_return`` ``[N, M]``.
- ``acting`` ``[N, M]``: the agents present in the world (``env.agents``). An agent absent from a world (not yet
  arrived, or done before the others) observes zeros, gets no reward and is sent no action.
- A world ends when it has no agents left: ``terminated`` when the last agents to leave did so by termination,
  ``truncated`` when any of them was truncated. It is reset in the same ``step`` (``final_obs`` keeps where it
  ended); the environment's own ``max_cycles`` (or the like) is its time limit.
- The ``critic`` group is the environment's global ``state()`` when it has one, else every agent's
  observation concatenated (``[N, M * O]``).
- Observations of a ``Dict`` space with ``observation`` and ``action_mask`` (PettingZoo's legal-move
  convention) give ``obs`` and ``action_mask``.
- Agents must be alike (one observation shape, one action space): refused in one line otherwise.
- A PettingZoo id for the command line: ``pettingzoo:<module>`` whose module has ``parallel_env``, with its
  keyword arguments in the id (``pettingzoo:mpe2.simple_spread_v3?N=3``); the module is imported only when
  the user names it (like any id that imports code).

World ``i`` is seeded ``seed + i`` at a seeded reset; later episodes draw from each world's own generator.
"""

from __future__ import annotations

import importlib
import math
import random
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.types import EnvSpec, StepResult
from rl_gpu.envs.engine_worlds import WorldsInEngine
from rl_gpu.envs.params import split_id_parameters

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _require_pettingzoo() -> Any:
    try:
        import pettingzoo
    except ImportError:
        raise ImportError("PettingZoo environments need pettingzoo (pip install 'rl-gpu[pettingzoo]')") from None
    return pettingzoo


def _box_parts(space: Any, label: str) -> tuple[tuple[int, ...], bool]:
    """``(observation shape, has an action mask)`` of one agent's observation space."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}:
        return _box_parts(space["observation"], label)[0], True
    if not isinstance(space, spaces.Box):
        raise UsageError(f"{label}: observations must be Box spaces (or a Dict of 'observation' and "
                         f"'action_mask'), got {space}")
    return tuple(int(d) for d in space.shape), False


class PettingZooEnv(WorldsInEngine):
    """N copies of a PettingZoo ``ParallelEnv`` behind the :class:`~rl_gpu.core.types.VecEnv` protocol.

    Args:
        env_fn: builds one world (``mpe2.simple_spread_v3.parallel_env``, a class, a lambda), called N times.
        num_envs: N worlds.
        device: where observations, rewards and flags are handed over.
        seed: the first world's seed (world ``i`` gets ``seed + i``); None: drawn from the operating system.
        max_episode_steps: the environment's own time limit, when it has no ``max_cycles`` (or ``max_steps``)
            attribute to read it from: it bounds evaluation episodes, and truncations are bootstrapped.
        validate_actions: check action shapes, ranges and NaN before stepping.
        name: how messages name the environment.
        **env_kwargs: passed to every ``env_fn`` call.
    """

    num_players = 1

    def __init__(self, env_fn: Callable[..., Any], num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int | None = None, *, max_episode_steps: int | None = None, validate_actions: bool = True,
                 name: str | None = None, **env_kwargs: Any) -> None:
        _require_pettingzoo()
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if not callable(env_fn):
            raise UsageError(f"from_pettingzoo takes a function that builds a ParallelEnv, got {env_fn!r}")
        self.label = name or getattr(env_fn, "__module__", None) or repr(env_fn)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.validate_actions = validate_actions
        self.envs = [env_fn(**env_kwargs) for _ in range(num_envs)]
        first = self.envs[0]
        for attr in ("possible_agents", "reset", "step", "observation_space", "action_space"):
            if not hasattr(first, attr):
                raise UsageError(f"{self.label}: env_fn must build a PettingZoo ParallelEnv; what it built has no "
                                 f"{attr!r}")
        self.agents = list(first.possible_agents)
        self._index = set(self.agents)
        self.num_agents = len(self.agents)
        if self.num_agents == 0:
            raise UsageError(f"{self.label}: the environment has no possible_agents")
        self._init_spaces(first)
        self.max_episode_steps = max_episode_steps
        for attr in ("max_cycles", "max_steps", "max_episode_steps"):
            value = getattr(first.unwrapped, attr, None) if hasattr(first, "unwrapped") else None
            if self.max_episode_steps is None and isinstance(value, int) and not isinstance(value, bool) and value > 0:
                self.max_episode_steps = value
                break
        n, m = num_envs, self.num_agents
        self._return = np.zeros((n, m), np.float32)
        self._length = np.zeros(n, np.int64)
        self._seed = random.SystemRandom().randrange(2**31) if seed is None else int(seed)
        self._last: StepResult | None = None
        self.reset(self._seed)

    # -- description ------------------------------------------------------------------------------------------
    def _init_spaces(self, env: Any) -> None:
        from gymnasium import spaces

        label = self.label
        parts = {_box_parts(env.observation_space(a), label) for a in self.agents}
        if len(parts) != 1:
            raise UsageError(f"{label}: its agents observe differently shaped things {sorted(parts)}: rl_gpu shares "
                             "one network across agents, so agents must observe alike")
        self.obs_shape, self._masked = parts.pop()
        acts = [env.action_space(a) for a in self.agents]
        if all(isinstance(s, spaces.Discrete) for s in acts):
            if len({(int(s.n), int(s.start)) for s in acts}) != 1 or int(acts[0].start) != 0:
                raise UsageError(f"{label}: its agents must share one Discrete(n) action space starting at 0, got "
                                 f"{acts}")
            self.num_actions, self.action_shape = int(acts[0].n), ()
            self.action_low = self.action_high = ()
        elif all(isinstance(s, spaces.Box) and len(s.shape) == 1 for s in acts):
            bounds = {(tuple(s.low.tolist()), tuple(s.high.tolist())) for s in acts}
            if len(bounds) != 1:
                raise UsageError(f"{label}: its agents have different action spaces; agents must act alike")
            (low, high), = bounds
            self.num_actions, self.action_shape = 0, (int(acts[0].shape[0]),)
            finite = all(math.isfinite(v) for v in (*low, *high))
            self.action_low, self.action_high = (low, high) if finite else ((), ())
        else:
            raise UsageError(f"{label}: actions must be Discrete or 1-D Box spaces, the same for every agent, got "
                             f"{acts}")
        self._state_size = 0
        state_space = getattr(env, "state_space", None)
        if isinstance(state_space, spaces.Box):
            self._state_size = math.prod(state_space.shape)

    @property
    def is_continuous(self) -> bool:
        return len(self.action_shape) > 0

    @property
    def spec(self) -> EnvSpec:
        m, o = self.num_agents, math.prod(self.obs_shape)
        critic = self._state_size or m * o
        groups = {"policy": self.obs_shape, "critic": (critic,)} if m > 1 else {"policy": self.obs_shape}
        return EnvSpec(
            obs_shape=self.obs_shape, num_actions=self.num_actions, action_shape=self.action_shape,
            action_low=self.action_low, action_high=self.action_high, obs_groups=groups, num_agents=m,
            max_episode_steps=self.max_episode_steps,
            episode_horizon=self.max_episode_steps, has_action_mask=self._masked, functional=False,
            exact_resume=False,
        )

    # -- one world --------------------------------------------------------------------------------------------
    def _world(self, i: int, obs: dict, into: dict[str, np.ndarray], final: bool = False) -> None:
        """Write world ``i``'s observations (and masks, presence, state) from ``obs`` into the arrays of ``into``:
        those of the agents still there, or (``final``) of every agent the step observed, the leaving ones too."""
        env = self.envs[i]
        present = set(obs) if final else set(env.agents)
        for j, agent in enumerate(self.agents):
            seen = agent in present and agent in obs
            into["acting"][i, j] = seen
            if not seen:
                into["obs"][i, j] = 0.0
                continue
            value = obs[agent]
            if self._masked:
                into["obs"][i, j] = np.asarray(value["observation"], np.float32).reshape(self.obs_shape)
                into["mask"][i, j] = np.asarray(value["action_mask"]).astype(bool).reshape(-1)
            else:
                into["obs"][i, j] = np.asarray(value, np.float32).reshape(self.obs_shape)
        if self._state_size:
            into["state"][i] = np.asarray(env.state(), np.float32).reshape(-1)

    def _arrays(self) -> dict[str, np.ndarray]:
        n, m = self.num_envs, self.num_agents
        out = {"obs": np.zeros((n, m, *self.obs_shape), np.float32), "acting": np.zeros((n, m), bool),
               "mask": np.ones((n, m, self.num_actions), bool)}
        if self._state_size:
            out["state"] = np.zeros((n, self._state_size), np.float32)
        return out

    def _tensor(self, array: np.ndarray) -> Tensor:
        return torch.from_numpy(array).to(self.device)

    def _result(self, now: dict[str, np.ndarray], final: dict[str, np.ndarray], reward: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, episode_return: np.ndarray,
                episode_length: np.ndarray) -> StepResult:
        n, m = self.num_envs, self.num_agents
        obs, final_obs = self._tensor(now["obs"]), self._tensor(final["obs"])
        mask = self._tensor(now["mask"])
        # An agent that is not there may be sent anything: every action is legal for it.
        mask = mask | ~self._tensor(now["acting"])[..., None] if self._masked else mask
        player = torch.zeros(n, dtype=torch.long, device=self.device)
        flags = (self._tensor(terminated), self._tensor(truncated))
        if m == 1:  # one agent: an ordinary single-agent task, no agent axis
            return StepResult(obs=obs[:, 0], reward=self._tensor(reward)[:, 0], terminated=flags[0],
                              truncated=flags[1], final_obs=final_obs[:, 0], action_mask=mask[:, 0],
                              current_player=player, episode_return=self._tensor(episode_return)[:, 0],
                              episode_length=self._tensor(episode_length))
        critic = self._tensor(now["state"]) if self._state_size else obs.reshape(n, -1)
        final_critic = self._tensor(final["state"]) if self._state_size else final_obs.reshape(n, -1)
        return StepResult(obs=obs, reward=self._tensor(reward), terminated=flags[0], truncated=flags[1],
                          final_obs=final_obs, action_mask=mask, current_player=player,
                          episode_return=self._tensor(episode_return), episode_length=self._tensor(episode_length),
                          critic_obs=critic, final_critic_obs=final_critic, acting=self._tensor(now["acting"]))

    # -- the VecEnv protocol ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> StepResult:
        """Start a new episode in every world (``seed``: world ``i`` is seeded ``seed + i``)."""
        now = self._arrays()
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else int(seed) + i)
            self._world(i, obs, now)
        return self._start(now)

    def _start(self, now: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> StepResult:
        """The step of worlds where ``rows`` start new episodes (the others as they are), from ``now``."""
        self._return[rows] = 0.0
        self._length[rows] = 0
        self._now = now
        n = self.num_envs
        no = np.zeros(n, bool)
        zero = np.zeros((n, self.num_agents), np.float32)
        self._last = self._result(now, now, zero, no, no, zero, self._length.copy())
        return self._last

    def reset_rows(self, rows: Tensor) -> StepResult:
        """Start a new episode in the worlds where ``rows`` (``[N]`` bool) is True."""
        index = np.flatnonzero(rows.reshape(self.num_envs).cpu().numpy())
        now = {k: v.copy() for k, v in self._now.items()}
        for i in index.tolist():
            obs, _ = self.envs[i].reset()
            self._world(i, obs, now)
        return self._start(now, index)

    def _host_actions(self, action: Tensor) -> np.ndarray:
        n, m = self.num_envs, self.num_agents
        self._check_actions(action)
        if self.is_continuous:
            return action.detach().float().reshape(n, m, -1).cpu().numpy()
        return action.detach().long().reshape(n, m).cpu().numpy()

    def step(self, action: Tensor) -> StepResult:
        """Advance every world by one joint action (``[N, M]`` or ``[N, M, D]``; no agent axis for M = 1);
        finished worlds restart in the same call."""
        actions = self._host_actions(action)
        n, m = self.num_envs, self.num_agents
        final, now = self._arrays(), self._arrays()
        reward = np.zeros((n, m), np.float32)
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            present = set(env.agents)
            joint = {a: (actions[i, j] if self.is_continuous else int(actions[i, j]))
                     for j, a in enumerate(self.agents) if a in present}
            obs, rewards, terms, truncs, _ = env.step(joint)
            for j, agent in enumerate(self.agents):
                reward[i, j] = float(rewards.get(agent, 0.0))
            self._world(i, obs, final, final=True)
            if not env.agents:
                leaving = [a for a in self.agents if terms.get(a) or truncs.get(a)]
                truncated[i] = any(truncs.get(a, False) for a in leaving)
                terminated[i] = not truncated[i]
                obs, _ = env.reset()
                self._world(i, obs, now)
            elif all(a in env.agents for a in obs if a in self._index):
                for key in now:  # nobody left: the world's next state is where it ended (state() read once)
                    now[key][i] = final[key][i]
            else:
                self._world(i, obs, now)
        self._return += reward
        self._length += 1
        episode_return, episode_length = self._return.copy(), self._length.copy()
        done = terminated | truncated
        self._return[done] = 0.0
        self._length[done] = 0
        self._now = now
        self._last = self._result(now, final, reward, terminated, truncated, episode_return, episode_length)
        return self._last

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __repr__(self) -> str:
        return f"PettingZooEnv({self.label!r}, num_envs={self.num_envs}, num_agents={self.num_agents}, " \
               f"device={str(self.device)!r})"


def from_pettingzoo(parallel_env_fn: Callable[..., Any], num_envs: int, device: str | torch.device = "cpu",
                    seed: int | None = None, **kwargs: Any) -> PettingZooEnv:
    """N worlds of a user's PettingZoo ``ParallelEnv`` as an rl_gpu batch (:class:`PettingZooEnv`): trainable by
    ``--algo mappo`` / ``ippo`` through :func:`rl_gpu.training.runner.train`, or stepped directly."""
    return PettingZooEnv(parallel_env_fn, num_envs, device, seed, **kwargs)


class PettingZooModuleEnv(PettingZooEnv):
    """``make("pettingzoo:<module>?k=v&...")``: the ``parallel_env`` of a module (``mpe2.simple_spread_v3``),
    built with the id's keyword arguments (read like VMAS's: ``true``/``false``, numbers, else strings)."""

    def __init__(self, module: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 *, max_episode_steps: int | None = None, validate_actions: bool = True, **kwargs: Any) -> None:
        name, in_id = split_id_parameters("pettingzoo:", module)
        if not _MODULE.fullmatch(name):
            raise UsageError(f"pettingzoo:{name}: a module is named by dotted identifiers (mpe2.simple_spread_v3), "
                             f"got {name[:80]!r}")
        try:
            fn = importlib.import_module(name).parallel_env
        except ImportError as e:
            raise UsageError(f"pettingzoo:{name}: cannot import module {name!r} ({e})") from None
        except AttributeError:
            raise UsageError(f"pettingzoo:{name}: module {name!r} has no parallel_env function") from None
        if max_episode_steps is not None:
            in_id.setdefault("max_cycles", int(max_episode_steps))
        try:
            super().__init__(fn, num_envs, device, seed, validate_actions=validate_actions,
                             name=f"pettingzoo:{name}", **in_id, **kwargs)
        except UsageError:
            raise
        except (TypeError, ValueError, AssertionError, RuntimeError, MemoryError, OverflowError) as e:
            # What the id's values make the module's own code raise: the id is what the user can change.
            raise UsageError(f"pettingzoo:{name}: parallel_env cannot be built with {in_id or 'no arguments'}: "
                             f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
        if self.max_episode_steps is None:
            raise UsageError(f"pettingzoo:{name}: its episodes have no positive time limit rl_gpu can read (a "
                             "max_cycles attribute); give one in the id, e.g. ?max_cycles=100, if parallel_env "
                             "takes it")
