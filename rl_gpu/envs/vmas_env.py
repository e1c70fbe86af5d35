"""Any VMAS scenario as a batch of multi-agent worlds: ``make("vmas:navigation", num_envs=N, n_agents=3)``.

VMAS (the Vectorized Multi-Agent Simulator, ``pip install 'rl-gpu[vmas]'``, GPLv3, imported only when a ``vmas:``
id is built) simulates N worlds of M agents in batched PyTorch on the run's device. This adapter gives them the
rl_gpu contract with an agent axis (:class:`~rl_gpu.core.types.StepResult` with M > 1):

- ``obs`` ``[N, M, O]``, ``reward`` ``[N, M]`` (each agent's own reward), ``action`` ``[N, M, D]`` (continuous,
  clamped to each agent's range by VMAS) or ``[N, M]`` (discrete: VMAS's product of an agent's discrete
  choices), ``episode_return`` ``[N, M]``; ``terminated`` (the scenario's ``done``), ``truncated`` (the time
  limit, never together with ``terminated``) and ``episode_length`` per world.
- The ``critic`` group is every agent's observation of the world, concatenated (``[N, M * O]``): what a
  centralised critic (MAPPO) reads.
- Same-step auto-reset: a world that finishes is reset before ``step`` returns, ``final_obs`` keeps where it
  ended. When every world finishes at once (a common horizon) they are reset in one vectorised call; otherwise
  finished worlds are reset one index at a time, as VMAS's own ``reset_at`` does.
- A scenario of one agent (``simple``) is an ordinary single-agent task: no agent axis, no critic group.
- Agents must be alike: scenarios whose agents have different observation sizes or action spaces are refused in
  one line (pad them in the scenario, or use a homogeneous variant).

Randomness: VMAS draws from one set of random states (torch's CPU generator, numpy's and Python's) shared by every
VMAS environment of the process. Each adapter keeps a stream of its own, swapped in around every call into VMAS
(and the CUDA generator of its device, which VMAS does not save), so two batches, a training one and an
evaluation one, never draw from each other's stream, and a seed gives the same worlds every time. The worlds'
state lives in VMAS's Python objects, so a resume restarts them (``spec.exact_resume`` is False).
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.types import EnvSpec, StepResult
from rl_gpu.envs.engine_worlds import WorldsInEngine
from rl_gpu.envs.params import split_id_parameters

DEFAULT_MAX_STEPS = 100
"""The time limit when none is given (BenchMARL's VMAS tasks use 100 steps as well)."""


def _require_vmas() -> Any:
    try:
        import vmas
    except ImportError:
        raise ImportError("vmas: environments need VMAS (pip install 'rl-gpu[vmas]')") from None
    return vmas


def parse_scenario(scenario: str) -> tuple[str, dict[str, Any]]:
    """``"navigation?n_agents=3&shared_rew=false"`` -> ``("navigation", {"n_agents": 3, "shared_rew": False})``:
    scenario parameters written in the id, so a checkpoint's id rebuilds the same task
    (:func:`~rl_gpu.envs.params.split_id_parameters`)."""
    return split_id_parameters("vmas:", scenario)


def _seeded_streams(seed: int) -> list:
    """Fresh (torch CPU, numpy, Python) random states in the form VMAS keeps them, all derived from ``seed``."""
    return [torch.Generator().manual_seed(seed).get_state(), np.random.RandomState(seed % 2**32).get_state(),
            random.Random(seed).getstate()]


class VmasEnv(WorldsInEngine):
    """N worlds of one VMAS scenario behind the :class:`~rl_gpu.core.types.VecEnv` protocol (M agents per world).

    Args:
        scenario: a VMAS scenario name (``navigation``, ``balance``, ``sampling``, ``transport``, ...), optionally
            with parameters (``navigation?n_agents=3``, :func:`parse_scenario`).
        num_envs: N worlds.
        device: where VMAS simulates and the tensors live.
        seed: the adapter's random stream (None: drawn from the operating system).
        max_episode_steps: time limit (``truncated``), default :data:`DEFAULT_MAX_STEPS`.
        continuous_actions: continuous forces (default) or VMAS's discrete actions.
        agent_ids: append a one-hot of the agent's index to its observation (``[N, M, O + M]``), so that one
            network shared by the agents can still act differently per agent; in an id:
            ``vmas:navigation?agent_ids=true``. The ``critic`` group stays the agents' own observations.
        validate_actions: check action shapes, ranges and NaN before stepping.
        **scenario_kwargs: the scenario's own parameters (``n_agents=3``, ...), as ``vmas.make_env`` takes them.
    """

    num_players = 1

    def __init__(self, scenario: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 *, max_episode_steps: int | None = None, continuous_actions: bool = True,
                 agent_ids: bool = False, validate_actions: bool = True, **scenario_kwargs: Any) -> None:
        vmas = _require_vmas()
        scenario, in_id = parse_scenario(scenario)
        both = sorted(set(in_id) & set(scenario_kwargs))
        if both:
            raise UsageError(f"vmas:{scenario}: {', '.join(both)} given both in the id and as arguments")
        scenario_kwargs = {**in_id, **scenario_kwargs}
        agent_ids = scenario_kwargs.pop("agent_ids", agent_ids)  # the adapter's option, not the scenario's
        if not isinstance(agent_ids, bool):
            raise UsageError(f"vmas:{scenario}: agent_ids is true or false, got {agent_ids!r}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        from vmas.simulator.environment import Environment

        self._shared = Environment.vmas_random_state
        self.scenario = scenario
        self.num_envs = num_envs
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.max_episode_steps = DEFAULT_MAX_STEPS if max_episode_steps is None else int(max_episode_steps)
        self.validate_actions = validate_actions
        self._set_streams(seed)
        known = (*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios)
        if scenario not in known:
            raise UsageError(f"vmas:{scenario}: no such VMAS scenario; VMAS has {', '.join(vmas.scenarios)}, the MPE "
                             f"tasks {', '.join(vmas.mpe_scenarios)} and the debug ones {', '.join(vmas.debug_scenarios)}")
        try:
            with self._own_streams(), warnings.catch_warnings():
                # VMAS only warns about an argument its scenario does not take: a typo would go unnoticed.
                warnings.filterwarnings("error", message=".*passed but not used by the scenario")
                self.vmas = vmas.make_env(scenario, num_envs=num_envs, device=self.device,
                                          continuous_actions=continuous_actions, max_steps=self.max_episode_steps,
                                          clamp_actions=True, terminated_truncated=True, **scenario_kwargs)
        except (TypeError, ValueError, AssertionError, ModuleNotFoundError, UserWarning, RuntimeError, MemoryError,
                OverflowError) as e:
            raise UsageError(f"vmas:{scenario}: VMAS cannot make it with {scenario_kwargs or 'no arguments'}: "
                             f"{' '.join(str(e).split()) or type(e).__name__}") from None
        self._init_spaces(continuous_actions)
        n, m = num_envs, self.num_agents
        self.agent_ids = agent_ids and m > 1
        self._ids = torch.eye(m, device=self.device).expand(n, m, m) if self.agent_ids else None
        self._return = torch.zeros(n, m, device=self.device)
        self._length = torch.zeros(n, dtype=torch.long, device=self.device)
        self._mask = torch.ones(n, m, self.num_actions, dtype=torch.bool, device=self.device)
        self._acting = torch.ones(n, m, dtype=torch.bool, device=self.device)
        self._player = torch.zeros(n, dtype=torch.long, device=self.device)
        self._last: StepResult | None = None
        self.film_row: int | None = None
        """A world to draw after every step, before an auto-reset replaces it (``rl-gpu evaluate --video``)."""
        self.last_frame: np.ndarray | None = None
        """``[H, W, 3]`` uint8: world ``film_row`` as the last step left it."""
        self.frame_rate = 1.0 / float(self.vmas.world.dt)
        """Steps per second of simulated time (a video's frames per second)."""
        self.reset()

    # -- random streams ---------------------------------------------------------------------------------------
    def _set_streams(self, seed: int | None) -> None:
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        self._streams = _seeded_streams(int(seed))
        self._cuda_stream = None
        if self.device.type == "cuda":
            self._cuda_stream = torch.Generator(device=self.device).manual_seed(int(seed)).get_state()

    @contextlib.contextmanager
    def _own_streams(self) -> Iterator[None]:
        """VMAS's shared random states hold this adapter's stream for the block (and the device's CUDA one)."""
        shared = self._shared
        saved = list(shared)
        shared[:] = self._streams
        cuda_saved = None
        if self._cuda_stream is not None:
            cuda_saved = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self._cuda_stream, self.device)
        try:
            yield
        finally:
            self._streams = list(shared)
            shared[:] = saved
            if cuda_saved is not None:
                self._cuda_stream = torch.cuda.get_rng_state(self.device)
                torch.cuda.set_rng_state(cuda_saved, self.device)

    # -- description ------------------------------------------------------------------------------------------
    def _init_spaces(self, continuous: bool) -> None:
        from gym import spaces as old_spaces  # VMAS builds its spaces with gym

        env = self.vmas
        self.num_agents = env.n_agents
        label = f"vmas:{self.scenario}"
        obs_spaces = list(env.observation_space.spaces)
        if not all(isinstance(s, old_spaces.Box) and len(s.shape) == 1 for s in obs_spaces):
            raise UsageError(f"{label}: observations must be flat vectors per agent, got {obs_spaces[0]} "
                             "(dictionary observations are not supported)")
        sizes = {int(s.shape[0]) for s in obs_spaces}
        if len(sizes) != 1:
            raise UsageError(f"{label}: its agents observe vectors of different sizes {sorted(sizes)}: rl_gpu shares "
                             "one network across agents, so agents must observe alike")
        self.obs_shape = (sizes.pop(),)
        act = list(env.action_space.spaces)
        if continuous:
            lows = {tuple(np.asarray(s.low).tolist()) for s in act}
            highs = {tuple(np.asarray(s.high).tolist()) for s in act}
            if len(lows) != 1 or len(highs) != 1:
                raise UsageError(f"{label}: its agents have different action spaces; agents must act alike")
            self.num_actions, self.action_shape = 0, (int(act[0].shape[0]),)
            self.action_low, self.action_high = lows.pop(), highs.pop()
        else:
            counts = {int(s.n) for s in act}
            if len(counts) != 1:
                raise UsageError(f"{label}: its agents have different numbers of actions {sorted(counts)}")
            self.num_actions, self.action_shape = counts.pop(), ()
            self.action_low = self.action_high = ()

    @property
    def is_continuous(self) -> bool:
        return len(self.action_shape) > 0

    @property
    def reward_shape(self) -> tuple[int, ...]:
        return (self.num_envs, self.num_agents)

    @property
    def spec(self) -> EnvSpec:
        m, o = self.num_agents, self.obs_shape[0]
        policy = (o + m,) if self.agent_ids else self.obs_shape
        groups = {"policy": policy, "critic": (m * o,)} if m > 1 else {"policy": policy}
        return EnvSpec(
            obs_shape=policy, num_actions=self.num_actions, action_shape=self.action_shape,
            action_low=self.action_low, action_high=self.action_high,
            obs_groups=groups, num_agents=m,
            max_episode_steps=self.max_episode_steps, episode_horizon=self.max_episode_steps,
            functional=False, exact_resume=False,
        )

    # -- stepping ---------------------------------------------------------------------------------------------
    def _result(self, obs: Tensor, final_obs: Tensor, reward: Tensor, terminated: Tensor, truncated: Tensor,
                episode_return: Tensor, episode_length: Tensor) -> StepResult:
        n = self.num_envs
        self._obs = obs
        if self.num_agents == 1:  # a one-agent scenario is an ordinary single-agent task: no agent axis
            return StepResult(
                obs=obs[:, 0], reward=reward[:, 0], terminated=terminated, truncated=truncated,
                final_obs=final_obs[:, 0], action_mask=self._mask[:, 0], current_player=self._player,
                episode_return=episode_return[:, 0], episode_length=episode_length)
        critic, final_critic = obs.reshape(n, -1), final_obs.reshape(n, -1)
        if self._ids is not None:
            obs, final_obs = torch.cat([obs, self._ids], -1), torch.cat([final_obs, self._ids], -1)
        return StepResult(
            obs=obs, reward=reward, terminated=terminated, truncated=truncated, final_obs=final_obs,
            action_mask=self._mask, current_player=self._player, episode_return=episode_return,
            episode_length=episode_length, critic_obs=critic, final_critic_obs=final_critic, acting=self._acting,
        )

    def _observations(self) -> Tensor:
        """``[N, M, O]``: every agent's observation of the current state."""
        (obs,) = self.vmas.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False,
                                             get_dones=False)
        return torch.stack(list(obs), dim=1).float()

    def reset(self, seed: int | None = None) -> StepResult:
        """Start a new episode in every world (a given ``seed`` restarts the adapter's stream from it)."""
        if seed is not None:
            self._set_streams(seed)
        with self._own_streams():
            self.vmas.reset(return_observations=False)
            obs = self._observations()
        self._return.zero_()
        self._length.zero_()
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        zero = torch.zeros(self.num_envs, self.num_agents, device=self.device)
        self._last = self._result(obs, obs, zero, no, no, zero, self._length.clone())
        return self._last

    def _reset_worlds(self, rows: Tensor) -> Tensor | None:
        """Reset the worlds where ``rows`` (``[N]`` bool) is True; their new ``[N, M, O]`` observations (other rows:
        unchanged state), or None when no world was reset. Call inside :meth:`_own_streams`."""
        index = torch.nonzero(rows).flatten().tolist()
        if not index:
            return None
        if len(index) == self.num_envs:
            self.vmas.reset(return_observations=False)
        else:
            for i in index:
                self.vmas.reset_at(i, return_observations=False)
        return self._observations()

    def reset_rows(self, rows: Tensor) -> StepResult:
        """Start a new episode in the worlds where ``rows`` (``[N]`` bool) is True."""
        rows = rows.to(self.device, torch.bool).reshape(self.num_envs)
        with self._own_streams():
            fresh = self._reset_worlds(rows)
        if fresh is None:
            return self.observe()
        obs = torch.where(rows[:, None, None], fresh, self._obs)
        self._return.masked_fill_(rows[:, None], 0.0)
        self._length.masked_fill_(rows, 0)
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        zero = torch.zeros(self.num_envs, self.num_agents, device=self.device)
        self._last = self._result(obs, obs, zero, no, no, zero, self._length.clone())
        return self._last

    def _actions(self, action: Tensor) -> list[Tensor]:
        n, m = self.num_envs, self.num_agents
        self._check_actions(action)
        if self.is_continuous:
            return list(action.float().reshape(n, m, -1).unbind(1))
        return list(action.long().reshape(n, m, 1).unbind(1))

    def step(self, action: Tensor) -> StepResult:
        """Advance every world by one joint action (``[N, M, D]`` or ``[N, M]``); finished worlds restart in the
        same call."""
        actions = self._actions(action)
        with self._own_streams():
            obs, rewards, terminated, truncated, _ = self.vmas.step(actions)
            final_obs = torch.stack(list(obs), dim=1).float()
            terminated = terminated.reshape(self.num_envs).to(torch.bool)
            truncated = truncated.reshape(self.num_envs).to(torch.bool) & ~terminated
            done = terminated | truncated
            if self.film_row is not None:
                self.last_frame = self._draw(self.film_row)
            fresh = self._reset_worlds(done)
        # Some scenarios give each agent's reward as [N, 1].
        reward = torch.stack([r.reshape(self.num_envs) for r in rewards], dim=1).float()
        self._return += reward
        self._length += 1
        episode_return, episode_length = self._return.clone(), self._length.clone()
        obs = final_obs if fresh is None else torch.where(done[:, None, None], fresh, final_obs)
        self._return.masked_fill_(done[:, None], 0.0)
        self._length.masked_fill_(done, 0)
        self._last = self._result(obs, final_obs, reward, terminated, truncated, episode_return, episode_length)
        return self._last

    def _draw(self, index: int) -> np.ndarray:
        return np.ascontiguousarray(self.vmas.render(mode="rgb_array", env_index=index, visualize_when_rgb=False))

    def render_frame(self, index: int = 0) -> np.ndarray:
        """One ``[H, W, 3]`` uint8 frame of world ``index`` as it is (VMAS's renderer: pyglet and OpenGL)."""
        with self._own_streams():
            return self._draw(index)

    def close(self) -> None:
        if getattr(self.vmas, "viewer", None) is not None:
            self.vmas.viewer.close()

    def __repr__(self) -> str:
        return f"VmasEnv({self.scenario!r}, num_envs={self.num_envs}, num_agents={self.num_agents}, " \
               f"device={str(self.device)!r})"
