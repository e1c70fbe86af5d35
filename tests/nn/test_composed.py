"""The composed policy (encoder + optional memory + head, its own critic): frames get a CNN and stay bool in the
rollout, it learns what only the frame's layout says, trains, evaluates, loads and exports through the command
line; with memory, the state resets exactly where episodes restart, and replaying a rollout's sequence from its
recorded state gives back the log-probabilities and values it was collected with."""

import json
import pytest
import torch

from rl_gpu import make
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.collect.reference import collect
from rl_gpu.envs.testing.frames import DotFrames
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.nn.composed import ComposedActorCritic
from rl_gpu.nn.encoders import CNNEncoder, MLPEncoder

ENV_ID = "rl_gpu.envs.testing.frames:DotFrames"


def test_frames_get_a_cnn_vectors_an_mlp_and_both_take_flat_inputs():
    env = DotFrames(8, seed=0, size=5, channels=2)
    policy = policy_for_env(env.spec, (32,))
    assert isinstance(policy, ComposedActorCritic) and isinstance(policy.actor_encoder, CNNEncoder)
    assert policy.config() == {"kind": "composed", "obs_shape": [5, 5, 2], "num_actions": 3, "hidden_sizes": [32],
                               "channels": [16], "normalize_obs": False}
    obs = env.observe().obs
    assert obs.dtype == torch.bool
    out = policy.act(obs, deterministic=True)
    flat = policy.act(obs.reshape(8, -1), deterministic=True)
    assert torch.equal(out.action, flat.action) and torch.equal(out.value, flat.value)
    assert torch.equal(policy.export_module()(obs.reshape(8, -1).float()), out.action)
    vector = ComposedActorCritic((3, 4), action_dim=2, hidden_sizes=(8,))
    assert isinstance(vector.actor_encoder, MLPEncoder) and vector.is_continuous
    assert vector.act(torch.randn(6, 3, 4)).action.shape == (6, 2)
    with pytest.raises(ValueError, match="leave nothing of 5x5"):
        ComposedActorCritic((5, 5, 2), num_actions=3, channels=(4, 4, 4))
    # --policy categorical asks for MLPs: on frames, the flattened frame (no convolution).
    mlp = policy_for_env(env.spec, (32,), kind="categorical")
    assert isinstance(mlp.actor_encoder, MLPEncoder) and mlp.config()["obs_shape"] == [5, 5, 2]
    assert "channels" not in mlp.config() and mlp.act(obs).action.shape == (8,)


def test_the_cnn_learns_where_the_dot_is():
    torch.manual_seed(0)
    env = DotFrames(64, seed=1, size=5, channels=2)
    algo = PPO(policy_for_env(env.spec, (64,)), PPOConfig(num_minibatches=4, update_epochs=4), 2.5e-3, seed=0,
               env=env, num_steps=16)
    returns = [float(algo.iterate()["episode_return"]) for _ in range(25)]
    assert algo.last_rollout.obs.dtype == torch.bool  # frames stay bool in storage
    assert returns[0] < 8.0 and max(returns[-3:]) > 12.0, returns  # chance: 16/3 of 16 steps; perfect: 16


def test_it_trains_evaluates_loads_and_exports_through_the_cli(tmp_path, call_main):
    import rl_gpu
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.export import main as export
    from rl_gpu.cli.train import main as train

    code, _, err = call_main(train, "--env", ENV_ID, "--num-envs", "16", "--num-steps", "8",
                             "--max-updates", "2", "--eval-every", "1", "--eval-episodes", "8",
                             "--final-eval-episodes", "8", "--solve-threshold", "1e9", "--min-updates", "1",
                             "--hidden-sizes", "16", "--device", "cpu", "--quiet", "--output", tmp_path / "run")
    assert code == 1, err  # the goal is out of reach: every file written, exit 1
    best = tmp_path / "run" / "seed-11" / "best.pt"
    assert json.loads((tmp_path / "run" / "seed-11" / "config.json").read_text())["policy"] == "auto"
    code, out, err = call_main(evaluate, best, "--episodes", "4", "--device", "cpu", "--trust-env", ENV_ID)
    assert code == 0 and "mean return" in out, err
    loaded = rl_gpu.load(best)
    assert isinstance(loaded.policy, ComposedActorCritic)
    obs = DotFrames(8, seed=5).observe().obs
    code, _, err = call_main(export, best, "--format", "torchscript", "--output", tmp_path / "policy.pt")
    assert code == 0, err
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    assert torch.equal(scripted(obs.reshape(8, -1).float()), loaded.act(obs))


def _memory_policy(lstm=False):
    torch.manual_seed(0)
    return ComposedActorCritic((4,), num_actions=2, hidden_sizes=(8,), memory_size=6, lstm=lstm)


@pytest.mark.parametrize("lstm", [False, True])
def test_memory_resets_exactly_on_the_rows_that_restart(lstm):

    env = make("CartPole-v1", num_envs=6, device="cpu", seed=0, max_episode_steps=5)
    policy = _memory_policy(lstm)
    assert policy.initial_state(6).shape == (6, 2, 12 if lstm else 6)
    rollout = collect(policy, env, 12, torch.Generator().manual_seed(1))
    assert torch.equal(rollout.policy_state0, policy.initial_state(6))
    done = rollout.terminated | rollout.truncated
    assert bool(done.any()) and not bool(done.all())
    # Replay step by step: the state is the initial one after a row's episode ended, and carried elsewhere.
    state = rollout.policy_state0
    for t in range(12):
        out, after = policy.act_with_state(rollout.obs[t], state, deterministic=True)
        torch.testing.assert_close(out.value, rollout.value[t])
        state = torch.where(done[t][:, None, None], policy.initial_state(6), after)
    torch.testing.assert_close(state, rollout.policy_state)
    with pytest.raises(ValueError, match="has memory"):
        policy.act(rollout.obs[0])


@pytest.mark.parametrize("lstm", [False, True])
def test_the_exported_policy_with_memory_acts_as_the_checkpoint_step_by_step(lstm):
    """The ONNX model (state in, state out) run by onnxruntime over episodes equals act_with_state."""
    ort = pytest.importorskip("onnxruntime")
    from rl_gpu.interop.export import deployable, to_onnx_bytes

    policy = _memory_policy(lstm)
    policy.update_normalizer(torch.randn(64, 4) * 3 + 1) if policy.obs_rms is not None else None
    env = make("CartPole-v1", num_envs=6, device="cpu", seed=5, max_episode_steps=7)
    model = deployable(policy)
    session = ort.InferenceSession(to_onnx_bytes(policy), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()][:2] == ["obs", "state"]
    step = env.reset()
    ours, exported = policy.initial_state(6), torch.zeros(6, model.state_size)
    for _ in range(15):
        out, after = policy.act_with_state(step.obs, ours, deterministic=True)
        action, state_out = model(step.obs, exported)
        onnx_action, onnx_state = session.run(None, {"obs": step.obs.numpy(), "state": exported.numpy()})
        assert torch.equal(action, out.action) and torch.equal(torch.from_numpy(onnx_action), out.action)
        torch.testing.assert_close(state_out, after[:, 0])       # the actor's half of the state
        torch.testing.assert_close(torch.from_numpy(onnx_state), after[:, 0], rtol=1e-5, atol=1e-5)
        step = env.step(out.action)
        done = (step.terminated | step.truncated)[:, None]
        ours = torch.where(done[:, :, None], policy.initial_state(6), after)
        exported = torch.where(done, torch.zeros_like(state_out), state_out)


@pytest.mark.parametrize("lstm", [False, True])
def test_a_sequence_replayed_from_its_recorded_state_gives_back_its_log_probs_and_values(lstm):

    env = make("CartPole-v1", num_envs=5, device="cpu", seed=2, max_episode_steps=4)
    policy = _memory_policy(lstm)
    rollout = collect(policy, env, 10, torch.Generator().manual_seed(3))
    done = rollout.terminated | rollout.truncated
    starts = torch.cat([torch.zeros_like(done[:1]), done[:-1]])
    log_prob, entropy, value = policy.evaluate_sequence(rollout.obs, rollout.action, rollout.action_mask,
                                                        rollout.policy_state0, starts)
    torch.testing.assert_close(log_prob, rollout.log_prob)  # ratio 1 on the first epoch
    torch.testing.assert_close(value, rollout.value)
    assert entropy.shape == (10, 5) and bool((entropy > 0).all())
    log_prob.sum().backward()  # through time, into the memory's weights
    assert policy.actor_memory.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("memory, critic_obs_dim", [(0, 0), (8, 0), (0, 3), (8, 3)])
def test_value_runs_the_critics_branch_alone_and_equals_the_full_pass(memory, critic_obs_dim):
    """``value`` / ``value_with_state`` (every step's V(final_obs) in collection) give the values of the whole
    forward pass without running the actor's encoder or memory; bool frames enter as their 0/1 values."""
    torch.manual_seed(0)
    net = ComposedActorCritic((5, 5, 2), num_actions=3, hidden_sizes=(16,), memory_size=memory,
                              critic_obs_dim=critic_obs_dim)
    obs = torch.rand(6, 5, 5, 2) < 0.3
    critic = torch.randn(6, critic_obs_dim) if critic_obs_dim else None
    state = net.initial_state(6) + 0.1 * torch.randn(6, 2, memory) if memory else None
    calls = []
    net.actor_encoder.register_forward_hook(lambda *_: calls.append("actor"))
    _, c, _ = net._features(obs.float(), state, critic)
    full = net._value(c, 6, obs.device)
    calls.clear()
    value = net.value_with_state(obs, state, critic) if memory else net.value(obs, critic_obs=critic)
    assert calls == []
    torch.testing.assert_close(value, full, rtol=0, atol=0)
    if memory:
        with pytest.raises(ValueError, match="has memory"):
            net.value_with_state(obs, None, critic)
    if critic_obs_dim:   # without the critic group: zero values, as the full pass reports
        assert torch.equal(net.value_with_state(obs, state, None), torch.zeros(6))


def test_bool_observations_become_the_same_floats_eager_compiled_and_scripted():
    from rl_gpu.nn.normalization import to_float

    obs = torch.rand(4, 10, 10, 6) < 0.2
    expected = obs.to(torch.float32)
    for out in (to_float(obs), torch.compile(to_float, backend="eager")(obs), torch.jit.script(to_float)(obs),
                to_float(obs.to(torch.uint8)), to_float(expected)):
        assert out.dtype == torch.float32 and torch.equal(out, expected)
    assert to_float(expected) is expected
