"""A compiled PPO update on the CPU gathers a minibatch's boolean/uint8 frames and casts them eagerly
(:meth:`rl_gpu.algos.ppo.update.UpdateUnits.gather_frames`): the same floats, the same update as eager code."""

import pytest
import torch

from rl_gpu.algos.ppo.batch import flatten_batch
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.update import UpdateUnits
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.actor_critic import ActorCritic

T, N, O, A = 8, 8, 40, 3


def _rollout(obs: torch.Tensor) -> Rollout:
    g = torch.Generator().manual_seed(1)
    zeros, false = torch.zeros(T, N), torch.zeros(T, N, dtype=torch.bool)
    return Rollout(obs=obs, action_mask=torch.ones(T, N, A, dtype=torch.bool),
                   action=torch.randint(0, A, (T, N), generator=g), log_prob=torch.full((T, N), -1.1),
                   value=torch.randn(T, N, generator=g), reward=torch.randn(T, N, generator=g),
                   terminated=torch.rand(T, N, generator=g) < 0.1, truncated=false, final_value=zeros,
                   bootstrap_value=torch.zeros(N), weight=torch.ones(T, N), live=~false,
                   learner_seat=torch.zeros(N, dtype=torch.long), episode_return=zeros,
                   episode_length=torch.zeros(T, N, dtype=torch.long), all_weights_one=True)


def _units(mode: str) -> UpdateUnits:
    torch.manual_seed(0)
    policy = ActorCritic(O, A, (16,))
    return UpdateUnits(policy, torch.optim.Adam(policy.parameters(), lr=1e-3), PPOConfig(update_epochs=1,
                                                                                          num_minibatches=2), mode)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.float32])
def test_frames_are_gathered_as_floats_only_for_a_compiled_cpu_loss(dtype):
    frames = (torch.rand(T, N, O, generator=torch.Generator().manual_seed(0)) < 0.2).to(dtype)
    flat = flatten_batch(_rollout(frames), torch.zeros(T, N), torch.zeros(T, N), False, False)
    idx = torch.tensor([5, 0, 63, 17])
    assert _units("off").gather_frames(flat, idx) == {}
    gathered = UpdateUnits.gather_frames(type("Units", (), {"mode": "inductor"})(), flat, idx)
    if dtype == torch.float32:
        assert gathered == {}  # float observations: the compiled loss gathers them itself
    else:
        assert list(gathered) == ["obs"] and gathered["obs"].dtype == torch.float32
        assert torch.equal(gathered["obs"], frames.flatten(0, 1)[idx].float())


def test_a_compiled_loss_on_boolean_frames_equals_the_eager_one():
    g = torch.Generator().manual_seed(3)
    batch = _rollout(torch.rand(T, N, O, generator=g) < 0.2)
    flat = flatten_batch(batch, torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), False, False)
    idx = torch.randperm(T * N, generator=g)[:32]
    results = []
    for mode in ("off", "inductor"):
        units = _units(mode)
        gathered = units.gather_frames(flat, idx)
        assert list(gathered) == ([] if mode == "off" else ["obs"])
        loss, stats = units.loss(flat, idx, None, gathered)
        loss.backward()
        results.append((loss.detach(), stats, [p.grad for p in units.policy.parameters()]))
    (loss, stats, grads), (c_loss, c_stats, c_grads) = results
    torch.testing.assert_close(c_loss, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c_stats, stats, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, c_grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
