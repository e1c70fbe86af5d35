"""MAPPO's and IPPO's hyper-parameters: PPO's, applied to every (world, agent) row."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.algos.ppo.config import PPOConfig


@dataclass(frozen=True)
class MAPPOConfig(PPOConfig):
    """MAPPO / IPPO hyper-parameters (PPO's names). Minibatches are slots of the flattened ``[T * N * M]``
    rollout (every agent's decisions); with norm_reward each agent of each world keeps its own running return,
    and one running scale serves every agent (rewards summed over hundreds of agents would otherwise grow with
    their number)."""

    value_norm: bool = True
    """the critic learns value targets normalised by their running mean and std (MAPPO's ValueNorm), read back in
    the task's units for advantages"""
    share_params: bool = True
    """one actor and one critic shared by every agent (MAPPO's default); off: each agent its own networks (stacked,
    evaluated in one batched call), minibatches of whole world-steps, and one exported actor file per agent"""
    world_critic: bool = False
    """MAPPO's centralised critic reads the world's critic group alone, once per world, one output per agent
    (BenchMARL's shared centralised critic, with a head per agent): 1/M of the per-agent critic's arithmetic;
    minibatches of whole world-steps. Off: each agent's row is valued from concat(its observation, the group)"""
