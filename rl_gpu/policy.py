"""The quickstart's names for networks (``from rl_gpu.policy import ActorCritic``); the networks live in
:mod:`rl_gpu.nn`."""

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import actor_critic as _networks
from rl_gpu.nn.actor_critic import GaussianActorCritic, UniformRandomPolicy, build_policy, policy_for_env
from rl_gpu.nn.normalization import RunningMeanStd


class ActorCritic(_networks.ActorCritic):
    """:class:`rl_gpu.nn.actor_critic.ActorCritic` with the roulette game's sizes as defaults (6 observation
    values, 3 actions), so the quickstart's ``ActorCritic()`` builds the network it trains."""

    def __init__(self, obs_dim: int = 6, num_actions: int = 3, hidden_sizes=(64, 64),
                 normalize_obs: bool = False) -> None:
        super().__init__(obs_dim, num_actions, hidden_sizes, normalize_obs)


__all__ = ["ActorCritic", "GaussianActorCritic", "PolicyOutput", "RunningMeanStd", "UniformRandomPolicy",
           "build_policy", "policy_for_env"]
