import torch

from rl_gpu.envs import RussianRouletteVectorized
from rl_gpu.policy import ActorCritic
from rl_gpu.rollout import collect_episodes
from rl_gpu.optimization import update_policy


def main() -> None:
    """Run one complete collection/update cycle on CUDA or CPU."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(11)
    env = RussianRouletteVectorized(4096, device=device, seed=12)
    policy = ActorCritic().to(env.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.001)
    policy_rng = torch.Generator(device=env.device).manual_seed(13)
    opponent_rng = torch.Generator(device=env.device).manual_seed(14)

    batch = collect_episodes(policy, env, policy_rng, opponent_rng)
    if batch.observations.device != env.device:
        raise RuntimeError("rollout changed device")
    if not bool(batch.weights.sum() > 0):
        raise RuntimeError("no learner decisions to optimize")
    metrics = update_policy(policy, optimizer, batch)
    print("device:", env.device)
    print("learner decisions:", int(batch.weights.sum()))
    print("loss:", metrics.loss)


if __name__ == "__main__":
    main()
