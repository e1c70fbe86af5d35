"""MAPPO (a centralised critic) and IPPO (each agent's critic on its own observation) as algorithms.

Both are PPO (:class:`~rl_gpu.algos.ppo.algorithm.PPO`) whose rollouts carry an agent axis: the collector
(:func:`rl_gpu.collect.agents.collect_agents`) records ``[T, N, M]`` decisions of one shared actor, and the
update learns from the rollout's ``N * M`` agent rows (:meth:`~rl_gpu.data.rollout.Rollout.agents_as_rows`):
advantages per agent (GAE over each agent's own rewards, the world's episode ends), minibatches shuffled over
every agent's decisions. MAPPO's critic reads ``concat(agent's observation, the world's critic group)`` (VMAS:
every agent's observation), so it can value what the agent alone cannot see; with ``world_critic`` it reads the
group alone, once per world, one output per agent (:mod:`rl_gpu.nn.actor_critic`). IPPO's reads the agent's
observation only. The actor is the same in both, and is what evaluation and export use. With ``value_norm`` (the
default) the critic learns normalised value targets (:class:`~rl_gpu.nn.normalization.ValueNormalizer`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.algos.base import Iteration, Setup
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.update import UpdateMetrics
from rl_gpu.collect.reference import collect
from rl_gpu.core.pytree import tree_map
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import EnvSpec, VecEnv
from rl_gpu.data.episodes import agent_metrics
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.seat_agents import seat_game
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.nn.memory import reset_state
from rl_gpu.nn.normalization import ValueNormalizer
from rl_gpu.nn.opponents import StackedActors
from rl_gpu.nn.per_agent import PerAgentActorCritic

AGENT_METRICS = ("team_return", "agent_return_min", "agent_return_max")
"""What each iteration reports beyond PPO's metrics (:func:`~rl_gpu.data.episodes.agent_metrics`)."""


class MAPPO(PPO):
    """Multi-agent PPO with a centralised critic and parameters shared across agents."""

    centralised = True
    name = "mappo"

    @classmethod
    def critic_spec(cls, spec: EnvSpec) -> EnvSpec:
        """The spec the actor-critic is sized from: the environment's (MAPPO), or without its ``critic`` group
        (IPPO)."""
        if cls.centralised:
            return spec
        return spec.policy_only()

    @classmethod
    def from_setup(cls, setup: Setup, config: MAPPOConfig) -> MAPPO:
        env = setup.env
        spec = env.spec
        if spec.num_agents < 2:
            raise ValueError(f"--algo {cls.name} trains worlds of several agents acting at once; "
                             f"{type(env).__name__} has one agent per row: use --algo ppo")
        if cls.centralised and "critic" not in spec.obs_groups:
            raise ValueError(f"--algo mappo's critic reads the world's critic observation group, and "
                             f"{type(env).__name__} has none: use --algo ippo")
        if setup.memory_size and not config.share_params:
            raise ValueError(f"--algo {cls.name} --no-share-params with --memory: a policy with memory is one network "
                             "shared by the agents; drop --no-share-params")
        if setup.policy != "auto" and not config.share_params:
            raise ValueError(f"--policy {setup.policy} is one network the agents share; --no-share-params builds one "
                             "per agent (the per_agent kind): drop one of them")
        if config.world_critic:
            cls._check_world_critic(setup, config, setup.num_steps * env.num_envs)
        if config.share_params:
            policy = policy_for_env(cls.critic_spec(spec), setup.hidden_sizes, setup.normalize_obs,
                                    setup.init_log_std, kind=setup.policy, memory_size=setup.memory_size,
                                    lstm=setup.lstm, world_agents=spec.num_agents if config.world_critic else 0)
        else:
            cls._check_separate(config, setup.num_steps * env.num_envs)
            policy = PerAgentActorCritic.for_spec(cls.critic_spec(spec), setup.hidden_sizes, setup.normalize_obs,
                                                  setup.init_log_std)
        if setup.opponent is not None:
            cls._check_league(env, config)
        policy = policy.to(env.device)
        algo = cls(policy, config, setup.learning_rate, derive_seed(setup.seed, "policy"), setup.compile,
                   env=env, num_steps=setup.num_steps, anneal_lr=setup.anneal_lr,
                   opponent_seed=derive_seed(setup.seed, "opponent"), precision=setup.precision)
        if setup.opponent is not None:  # self-play against a league (rl_gpu.training.league): its members
            algo.opponent = setup.opponent(algo.policy)
        return algo

    @classmethod
    def _check_league(cls, env: VecEnv, config: MAPPOConfig) -> None:
        """A league plays the seats the learner does not: a turn-based game's, with one shared actor."""
        if seat_game(env) is None:
            raise ValueError(f"--self-play with --algo {cls.name} plays a turn-based game's seats as agents "
                             f"(ID?seats_as_agents=1, e.g. LeducHoldem-v0?seats_as_agents=1); {type(env).__name__} "
                             "has agents acting at once: drop --self-play")
        if not config.share_params:
            raise ValueError(f"--self-play with --algo {cls.name} --no-share-params: the league's members are "
                             "snapshots of one shared actor; drop --no-share-params")

    @classmethod
    def _check_world_critic(cls, setup: Setup, config: MAPPOConfig, world_steps: int) -> None:
        """A world critic: MAPPO's, one shared plain MLP actor-critic, minibatches of whole world-steps."""
        if not cls.centralised:
            raise ValueError("--world-critic is MAPPO's centralised critic; --algo ippo's critics read each agent's "
                             "own observation: use --algo mappo or drop --world-critic")
        if not config.share_params or setup.memory_size or setup.policy != "auto":
            raise ValueError("--world-critic is built on one shared MLP actor-critic: drop --no-share-params, "
                             "--memory and --policy")
        cls._check_separate(config, world_steps, "--world-critic")

    @classmethod
    def _check_separate(cls, config: MAPPOConfig, world_steps: int, flag: str = "--no-share-params") -> None:
        """Separate networks per agent, or a world critic, learn from minibatches of whole world-steps (every
        agent's row of each)."""
        if world_steps % config.num_minibatches:
            raise ValueError(f"--algo {cls.name} with {flag} splits the rollout's {world_steps} world-steps "
                             f"(num_steps x num_envs) into minibatches: num_minibatches={config.num_minibatches} "
                             "must divide it")
        if config.micro_batch_size is not None:
            raise ValueError(f"--algo {cls.name} with {flag} takes no --micro-batch-size (a micro-batch "
                             "would split a world-step's agents)")

    def __init__(self, policy, config: MAPPOConfig, *args, **kwargs) -> None:
        super().__init__(policy, config, *args, **kwargs)
        self.metric_names = (*self.metric_names, *AGENT_METRICS)
        self.value_normalizer: ValueNormalizer | None = None
        self._opponent_state: tuple | None = None
        """League opponents with memory: their state where the last continuing rollout ended, and the member of each
        row then."""
        if getattr(config, "value_norm", False):
            self.value_normalizer = ValueNormalizer().to(self.device)
            self.units.value_norm = self.value_normalizer

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.value_normalizer is not None:
            state["value_normalizer"] = self.value_normalizer.state_dict()
        if self._opponent_state is not None:
            state["opponent_state"], state["opponent_slot"] = self._opponent_state
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.value_normalizer is not None:
            self.value_normalizer.load_state_dict(state["value_normalizer"])
        if "opponent_state" in state:
            self._opponent_state = (tree_map(lambda x: x.to(self.device), state["opponent_state"]),
                                    state["opponent_slot"].to(self.device))

    def _permutations(self, num_slots: int) -> Tensor:
        """PPO's shuffles over every agent's decisions; with one network per agent or a world critic, over
        world-steps, each bringing its M agent rows in order (slot ``w * M + m``), so a minibatch's rows stay in
        groups of M."""
        m = max(getattr(self._policy, "num_agents", 1), getattr(self._policy, "world_agents", 0))
        if m == 1:
            return super()._permutations(num_slots)
        steps = super()._permutations(num_slots // m)
        return (steps[..., None] * m + torch.arange(m, device=steps.device)).flatten(-2)

    @staticmethod
    def rows_of(env: VecEnv) -> int:
        return env.num_envs * env.spec.num_agents

    def collect(self, env: VecEnv | None = None, num_steps: int | None = None, *, episodic: bool | None = None,
                opponent_rng=None) -> Rollout:
        """One ``[T, N, M]`` rollout (:func:`rl_gpu.collect.agents.collect_agents`), fresh tensors each call."""
        env, num_steps, episodic, opponent_rng = self._bound(env, num_steps, episodic, opponent_rng)
        carried = None if episodic or not self.recurrent else self._policy_state.get(env)
        league = isinstance(self.opponent, StackedActors) and env is self.env
        rollout = collect(self._policy, env, num_steps, self.policy_rng, episodic=episodic, opponent_rng=opponent_rng,
                          policy_state=carried, opponent=self.opponent if league else None,
                          controlled=self.league_controlled(env) if league else None,
                          opponent_state=self._opponent_memory() if league and not episodic else None)
        if self.recurrent and not episodic:
            self._policy_state[env] = rollout.policy_state
        if league and not episodic and rollout.opponent_state is not None:
            self._opponent_state = (rollout.opponent_state, self.opponent.slot.clone())
        return rollout

    def _opponent_memory(self):
        """The league opponents' memory where the last continuing rollout left it, reset in the rows whose world
        was given another member since (None: their initial state)."""
        if self._opponent_state is None:
            return None
        state, slot = self._opponent_state
        return reset_state(self.opponent.slot != slot, self.opponent.initial_state(slot.shape[0]), state)

    def league_controlled(self, env: VecEnv) -> Tensor:
        """``[N, M]`` bool, the seats the learner plays against the league (``self.opponent``, whose blocks hold
        whole worlds): every seat of a world assigned member 0 (its latest self: plain self-play), else seat
        ``world index mod M``, fixed so that a game running across two rollouts keeps the learner in its seat."""
        n, m = env.num_envs, env.spec.num_agents
        member = self.opponent.slot.view(n, m)[:, 0]
        seat = torch.arange(n, device=member.device) % m
        return torch.nn.functional.one_hot(seat, m).bool() | (member == 0)[:, None]

    def iterate(self, *args, **kwargs) -> Iteration:
        """PPO's iteration, plus the team's and each agent's returns (:data:`AGENT_METRICS`, means over the
        episodes that ended)."""
        result = super().iterate(*args, **kwargs)
        rollout = self.last_rollout
        return result.adding(
            per_episode=agent_metrics(rollout.done, rollout.episode_return, rollout.controlled))

    def update(self, rollout: Rollout) -> UpdateMetrics:
        """One PPO update on the rollout's agent rows (``[T, N * M]``)."""
        return super().update(rollout.agents_as_rows(critic=self.centralised))


class IPPO(MAPPO):
    """Independent PPO: each agent's critic reads its own observation; parameters shared across agents."""

    centralised = False
    name = "ippo"
