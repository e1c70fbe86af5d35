"""Multi-head policies (``--policy multihead`` on multitask: batches): each row acts through its own task's head,
exactly as that head alone; checkpoints rebuild them; ONNX export equals the policy; refusals."""

import pytest
import torch

from rl_gpu import make
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.nn.kinds import build_policy
from rl_gpu.nn.multihead import MultiHeadActorCritic, MultiHeadGaussianActorCritic

TASKS = "multitask:CartPole-v1|CartPole-v1?action_perm=1,0|CartPole-v1?length=1.0"


def test_each_row_uses_its_tasks_head():
    torch.manual_seed(0)
    env = make(TASKS, num_envs=9, seed=0)
    policy = policy_for_env(env.spec, (16, 16), kind="multihead")
    assert isinstance(policy, MultiHeadActorCritic) and policy.num_tasks == 3
    with torch.no_grad():
        policy.actor.heads.weight.normal_()
    obs = env.observe().obs
    logits, _ = policy(obs)
    h = policy.actor.trunk(obs)
    every = policy.actor.heads(h).view(9, 3, 2)
    for row in range(9):
        torch.testing.assert_close(logits[row], every[row, int(env.row_tasks[row])])
    rebuilt = build_policy(policy.config())
    rebuilt.load_state_dict(policy.state_dict())
    torch.testing.assert_close(rebuilt(obs)[0], logits)


def test_training_one_task_leaves_the_other_heads_alone():
    torch.manual_seed(1)
    env = make("multitask:CartPole-v1@1|CartPole-v1?action_perm=1,0@0", num_envs=8, seed=0)
    policy = policy_for_env(env.spec, (8,), kind="multihead")
    before = policy.actor.heads.weight.detach().clone()
    obs = env.observe().obs
    log_prob = policy.evaluate(obs, torch.ones(8, dtype=torch.long))[0].sum()
    log_prob.backward()
    grad = policy.actor.heads.weight.grad.view(2, 2, -1)
    assert grad[0].abs().sum() > 0 and torch.equal(grad[1], torch.zeros_like(grad[1]))
    assert torch.equal(before, policy.actor.heads.weight)


def test_the_gaussian_kind_and_onnx_export(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    from rl_gpu.interop.export import to_onnx_bytes

    env = make("multitask:Pendulum-v1|Pendulum-v1?g=5.0", num_envs=6, seed=0)
    policy = policy_for_env(env.spec, (8,), kind="multihead")
    assert isinstance(policy, MultiHeadGaussianActorCritic) and policy.config()["kind"] == "multihead_gaussian"
    with torch.no_grad():
        policy.actor.heads.weight.normal_()
    obs = env.observe().obs
    session = ort.InferenceSession(to_onnx_bytes(policy))
    out = session.run(None, {"obs": obs.numpy()})[0]
    expected = policy.act(obs, deterministic=True).action
    torch.testing.assert_close(torch.as_tensor(out), expected, atol=1e-5, rtol=1e-5)


def test_a_batch_without_tasks_is_refused():
    with pytest.raises(ValueError, match="multitask: id"):
        policy_for_env(make("CartPole-v1", num_envs=2).spec, kind="multihead")
