"""PPO with a policy that has memory: minibatches are whole columns replayed from the rollout's recorded state
(the first minibatch's ratio is 1), the state carries over from one rollout to the next and through a resume
exactly, and memory learns a cue that a feed-forward policy cannot see when it has to act."""

import copy
from typing import NamedTuple

import pytest
import torch

from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.algos.ppo.loss import LOSS_STATS
from rl_gpu.algos.ppo.sequences import sequence_batch, sequence_loss
from rl_gpu.algos.ppo.update import UpdateUnits
from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.collect.reference import collect
from rl_gpu.envs.registry import make
from rl_gpu.envs.base import TensorEnv
from rl_gpu.nn.composed import ComposedActorCritic

STEPS = 4


class Cue(NamedTuple):
    cue: torch.Tensor
    """[N] int64, 0 or 1: shown at the first step only."""
    t: torch.Tensor
    """[N] int64: the step within the episode."""


class RecallEnv(TensorEnv[Cue]):
    """A cue (+1 or -1) is shown at the first step; the observation is (cue or 0, 1 at the last step). Reward 1
    for the action equal to the cue at the last step, 0 otherwise: without memory, the best is a coin flip."""

    obs_shape = (2,)
    num_actions = 2

    def _sample_initial_state(self, n, g):
        zeros = torch.zeros(n, dtype=torch.long, device=self.device)
        return Cue(torch.randint(0, 2, (n,), generator=g, device=self.device), zeros)

    def _transition(self, s, a):
        last = s.t == STEPS - 1
        reward = (last & (a == s.cue)).float()
        return Cue(s.cue, s.t + 1), reward, last

    def _observe(self, s):
        shown = torch.where(s.t == 0, s.cue * 2 - 1, 0).float()
        return torch.stack([shown, (s.t == STEPS - 1).float()], dim=-1)


def _policy(memory: int, seed: int = 0, lstm: bool = False) -> ComposedActorCritic:
    torch.manual_seed(seed)
    return ComposedActorCritic((2,), num_actions=2, hidden_sizes=(16,), memory_size=memory, lstm=lstm)


def test_the_first_minibatch_replays_the_collection_exactly():
    env = RecallEnv(8, seed=0)
    policy = _policy(8)
    rollout = collect(policy, env, 10, torch.Generator().manual_seed(1))
    config = PPOConfig()
    advantage, returns = UpdateUnits(policy, torch.optim.Adam(policy.parameters()), config).gae(rollout)
    seq = sequence_batch(rollout, advantage, returns, continuous=False)
    assert bool(seq.starts.any()) and not bool(seq.starts[0].any())
    _, stats = sequence_loss(policy, config, seq, torch.arange(8))
    named = dict(zip(LOSS_STATS, stats.tolist()))
    assert abs(named["approx_kl"]) < 1e-6 and named["clip_fraction"] == 0.0, named


def test_a_turn_based_replay_holds_the_state_through_the_opponents_turns():
    """The collector advances the learner's memory on its own turns only; the replay must hold it elsewhere, or
    the first minibatch's ratios are no longer 1."""
    env = make("RussianRoulette-v0", num_envs=16, seed=0)
    torch.manual_seed(0)
    policy = ComposedActorCritic((6,), num_actions=3, hidden_sizes=(16,), memory_size=8)
    with torch.no_grad():  # larger weights than the initial ones, whose near-uniform actions hide the memory
        for p in policy.parameters():
            p.normal_(0.0, 0.5)
    rollout = collect(policy, env, 10, torch.Generator().manual_seed(1), episodic=True,
                      opponent_rng=torch.Generator().manual_seed(2))
    config = PPOConfig()
    advantage, returns = UpdateUnits(policy, torch.optim.Adam(policy.parameters()), config).gae(rollout, True)
    seq = sequence_batch(rollout, advantage, returns, continuous=False, weighted=True)
    assert bool(seq.hold.any()) and bool((~seq.hold).any())
    held = dict(zip(LOSS_STATS, sequence_loss(policy, config, seq, torch.arange(16))[1].tolist()))
    advanced = dict(zip(LOSS_STATS, sequence_loss(policy, config, seq._replace(hold=None), torch.arange(16))[1]
                        .tolist()))
    assert abs(held["approx_kl"]) < 1e-6 and held["clip_fraction"] == 0.0, held
    assert abs(advanced["approx_kl"]) > 1e-4, advanced


def test_each_agents_memory_moves_on_its_own_turns_and_the_replay_follows():
    """A game's seats as agents: one shared network with memory, one state per seat, advancing on that seat's
    turns only; the replay of the rollout's agent rows reproduces the collection exactly."""
    env = make("RussianRoulette-v0?seats_as_agents=1", num_envs=8, seed=0)
    torch.manual_seed(0)
    policy = ComposedActorCritic((6,), num_actions=3, hidden_sizes=(16,), memory_size=8)
    with torch.no_grad():
        for p in policy.parameters():
            p.normal_(0.0, 0.5)
    rollout = collect(policy, env, 12, torch.Generator().manual_seed(1))
    rows = rollout.agents_as_rows(critic=False)
    assert rows.policy_state0.shape == (16, 2, 8) and rows.policy_state.shape == (16, 2, 8)
    config = PPOConfig()
    advantage, returns = UpdateUnits(policy, torch.optim.Adam(policy.parameters()), config).gae(rows, True)
    seq = sequence_batch(rows, advantage, returns, continuous=False, weighted=True)
    held = dict(zip(LOSS_STATS, sequence_loss(policy, config, seq, torch.arange(16))[1].tolist()))
    advanced = dict(zip(LOSS_STATS, sequence_loss(policy, config, seq._replace(hold=None), torch.arange(16))[1]
                        .tolist()))
    assert held["approx_kl"] == 0.0 and held["clip_fraction"] == 0.0, held
    assert abs(advanced["approx_kl"]) > 1e-4, advanced


@pytest.mark.parametrize("algo", ["ippo", "mappo"])
def test_memory_trains_a_games_seats_and_separate_networks_refuse_it(tmp_path, call_main, algo):
    from rl_gpu.cli.train import main
    from rl_gpu.runtime.checkpoint import load_checkpoint

    env_id = "RussianRoulette-v0?seats_as_agents=1"
    code, _, err = call_main(main, "--env", env_id, "--algo", algo, "--memory", "gru", "--device", "cpu",
                             "--output", tmp_path / "run", "--num-envs", 32, "--num-steps", 16, "--total-timesteps",
                             1024, "--eval-episodes", 32, "--final-eval-episodes", 32, "--quiet")
    assert code == 0, err
    config = load_checkpoint(tmp_path / "run" / "seed-11" / "best.pt")["policy_config"]
    assert config["memory_size"] > 0 and config.get("critic_obs_dim", 0) == (12 if algo == "mappo" else 0)
    code, _, err = call_main(main, "--env", env_id, "--algo", algo, "--memory", "gru", "--no-share-params",
                             "--device", "cpu", "--output", tmp_path / "separate", "--total-timesteps", 1024)
    assert code == 2 and "a policy with memory is one network shared by the agents" in err, err
    assert not (tmp_path / "separate").exists()


def test_a_centralised_critic_with_memory_replays_its_values_and_reads_the_critic_group():
    """MAPPO with memory: the critic's encoder reads the agent's observation and the world's critic group; the
    replay of a seats rollout reproduces the collection's log-probabilities and values; the actor ignores the
    group and still acts without it (exports, players)."""
    from rl_gpu.nn.kinds import build_policy

    env = make("LeducHoldem-v0?seats_as_agents=1", num_envs=8, seed=0)
    torch.manual_seed(0)
    obs_dim, critic_dim = env.spec.obs_size, env.spec.critic_obs_size
    policy = ComposedActorCritic((obs_dim,), num_actions=env.spec.num_actions, hidden_sizes=(16,), memory_size=8,
                                 normalize_obs=True, critic_obs_dim=critic_dim)
    with torch.no_grad():
        for p in policy.parameters():
            p.normal_(0.0, 0.5)
    policy.update_normalizer(torch.randn(64, obs_dim), critic_obs=torch.randn(64, critic_dim) * 2 + 1)
    rollout = collect(policy, env, 12, torch.Generator().manual_seed(1))
    rows = rollout.agents_as_rows(critic=True)
    assert rows.critic_obs.shape == (12, 16, critic_dim)
    config = PPOConfig()
    advantage, returns = UpdateUnits(policy, torch.optim.Adam(policy.parameters()), config).gae(rows, True)
    seq = sequence_batch(rows, advantage, returns, continuous=False, weighted=True)
    held = dict(zip(LOSS_STATS, sequence_loss(policy, config, seq, torch.arange(16))[1].tolist()))
    assert held["approx_kl"] == 0.0 and held["clip_fraction"] == 0.0, held
    hold = rows.weight == 0
    starts = torch.cat([torch.zeros_like(rows.done[:1]), rows.done[:-1]])
    _, _, value = policy.evaluate_sequence(rows.obs, rows.action, rows.action_mask, rows.policy_state0, starts,
                                           hold=hold, critic_obs=rows.critic_obs)
    assert torch.allclose(value[~hold], rows.value[~hold], atol=1e-5)
    state = policy.initial_state(4)
    obs, critic = rows.obs[0, :4], rows.critic_obs[0, :4]
    with_group, _ = policy.act_with_state(obs, state, deterministic=True, critic_obs=critic)
    other, _ = policy.act_with_state(obs, state, deterministic=True, critic_obs=critic.flip(0))
    alone, after = policy.act_with_state(obs, state, deterministic=True)
    assert torch.equal(with_group.action, other.action) and torch.equal(with_group.action, alone.action)
    assert not torch.allclose(with_group.value, other.value) and torch.equal(alone.value, torch.zeros(4))
    assert torch.equal(after[:, 1], state[:, 1])  # the critic's memory is held without its input
    with pytest.raises(ValueError, match="pass critic_obs"):
        policy.evaluate_sequence(rows.obs, rows.action, rows.action_mask, rows.policy_state0, starts)
    rebuilt = build_policy(policy.config())
    rebuilt.load_state_dict(policy.state_dict())
    again, _ = rebuilt.act_with_state(obs, state, deterministic=True, critic_obs=critic)
    assert torch.equal(again.value, with_group.value)


def test_memory_trains_on_a_turn_based_game():
    torch.manual_seed(0)
    policy = ComposedActorCritic((6,), num_actions=3, hidden_sizes=(16,), memory_size=8)
    algo = PPO(policy, PPOConfig(num_minibatches=4, gamma=1.0), 1e-3, seed=0,
               env=make("RussianRoulette-v0", num_envs=32, seed=0), num_steps=10)
    results = [algo.iterate() for _ in range(2)]
    assert all(bool(torch.isfinite(r["loss"])) for r in results) and float(results[-1]["episodes"]) == 32


def test_the_state_carries_over_rollouts_and_a_resume_exactly():
    config = PPOConfig(num_minibatches=2, update_epochs=2)
    a = PPO(_policy(8), config, 1e-3, seed=3, env=RecallEnv(4, seed=1), num_steps=6)
    a.iterate()
    first = a._policy_state[a.env].clone()
    saved = copy.deepcopy(a.state_dict())
    env_state = copy.deepcopy(a.env.state_dict())
    a.iterate()
    # The second rollout started where the first ended.
    assert torch.equal(a.last_rollout.policy_state0, first)
    b = PPO(_policy(8, seed=9), config, 1e-3, seed=4, env=RecallEnv(4, seed=7), num_steps=6)
    b.load_state_dict(saved)
    b.env.load_state_dict(env_state)
    b.iterate()
    assert torch.equal(b.last_rollout.policy_state0, first)
    for x, y in zip(a.policy.parameters(), b.policy.parameters()):
        assert torch.equal(x, y)


def _rollouts(engine: bool, env_id: str, steps: int = 12, rounds: int = 3):
    """Three continuing rollouts of a GRU policy, the state carried from one to the next: through the rollout
    engine or the reference collector, from the same generators."""
    env = make(env_id, num_envs=6, seed=2) if env_id != "recall" else RecallEnv(6, seed=2)
    policy, generator, state, out = _policy(8) if env_id == "recall" else _cartpole_policy(), \
        torch.Generator().manual_seed(5), None, []
    runner = RolloutEngine(policy, env, steps) if engine else None
    for _ in range(rounds):
        if engine:
            rollout, env.state = runner.run(runner.draw(generator), policy_state=state)
        else:
            rollout = collect(policy, env, steps, generator, policy_state=state)
        state = rollout.policy_state
        out.append(rollout)
    return out


def _cartpole_policy():
    torch.manual_seed(0)
    return ComposedActorCritic((4,), num_actions=2, hidden_sizes=(16,), memory_size=8)


@pytest.mark.parametrize("env_id", ["recall", "CartPole-v1"])
def test_the_rollout_engine_collects_memory_as_the_reference_collector_does(env_id):
    fast, reference = _rollouts(True, env_id), _rollouts(False, env_id)
    assert bool(torch.stack([r.terminated | r.truncated for r in reference]).any())  # resets happen
    for a, b in zip(fast, reference):
        for name in ("obs", "action", "log_prob", "value", "reward", "terminated", "truncated", "final_value",
                     "bootstrap_value", "policy_state0", "policy_state"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def _compiled_matches_eager(device: str, mode: str, lstm: bool = False) -> None:
    config = PPOConfig(num_minibatches=2, update_epochs=2)
    runs = [PPO(_policy(8, lstm=lstm).to(device), config, 1e-3, seed=3, env=RecallEnv(4, seed=1, device=device),
                num_steps=6, compile=m) for m in ("off", mode)]
    for algo in runs:
        for _ in range(3):
            algo.iterate()
    eager, compiled = runs
    assert torch.allclose(eager.last_rollout.policy_state, compiled.last_rollout.policy_state, atol=1e-5)
    for x, y in zip(eager.policy.parameters(), compiled.policy.parameters()):
        assert torch.allclose(x, y, atol=1e-5)


def test_the_graphed_iterations_body_trains_memory_as_eager_does(monkeypatch):
    # What --compile cudagraphs captures (rollout with the state carried, sequence replay, update in one body),
    # run here without the capture: its minibatches are columns as in the eager update.
    config = PPOConfig(num_minibatches=2, update_epochs=2)
    eager, fused = (PPO(_policy(8, lstm=True), config, 1e-3, seed=3, env=RecallEnv(4, seed=1), num_steps=6)
                    for _ in range(2))
    monkeypatch.setattr(fused, "_graphed", lambda: True)
    monkeypatch.setattr(fused, "_graph", lambda key, fn: fn)
    for algo in (eager, fused):
        for _ in range(3):
            algo.iterate()
    assert torch.equal(eager.last_rollout.policy_state, fused.last_rollout.policy_state)
    for x, y in zip(eager.policy.parameters(), fused.policy.parameters()):
        assert torch.equal(x, y)


@pytest.mark.slow  # compiles the collection's step and the memory's step (20 s on 2 cores)
def test_inductor_trains_memory_as_eager_does():
    _compiled_matches_eager("cpu", "inductor")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("lstm", [False, True], ids=["gru", "lstm"])
def test_graph_capture_trains_memory_as_eager_does(lstm):
    # the whole iteration (rollout with the state carried, sequence replay, update) replayed as one CUDA graph
    _compiled_matches_eager("cuda", "cudagraphs", lstm)


def test_what_it_cannot_train_yet_is_refused():
    with pytest.raises(ValueError, match="not divisible by --num-minibatches 4"):
        PPO(_policy(8), PPOConfig(num_minibatches=4), 1e-3, seed=0, env=RecallEnv(6, seed=0), num_steps=8)


def _train(memory: int, lstm: bool = False) -> float:
    algo = PPO(_policy(memory, lstm=lstm), PPOConfig(num_minibatches=2, update_epochs=4, ent_coef=0.01), 3e-3, seed=0,
               env=RecallEnv(32, seed=0), num_steps=16)
    returns = [float(algo.iterate()["episode_return"]) for _ in range(40)]
    return sum(returns[-5:]) / 5


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_memory_learns_the_cue_a_feed_forward_policy_cannot_see():
    gru, lstm, without = _train(16), _train(16, lstm=True), _train(0)
    assert gru > 0.9 and lstm > 0.9 and without < 0.7, (gru, lstm, without)


def test_memory_from_the_command_line_trains_evaluates_and_loads(tmp_path, call_main):
    import rl_gpu
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.export import main as export
    from rl_gpu.cli.train import main as train

    code, _, err = call_main(train, "--env", "CartPole-v1", "--memory", "gru", "--memory-size", "8", "--num-envs",
                             "16", "--num-steps", "16", "--max-updates", "2", "--eval-every", "1", "--eval-episodes",
                             "8", "--final-eval-episodes", "8", "--solve-threshold", "1e9", "--min-updates", "1",
                             "--device", "cpu", "--quiet", "--output", tmp_path / "run")
    assert code == 1, err  # the goal is out of reach: every file written, exit 1
    best = tmp_path / "run" / "seed-11" / "best.pt"
    code, out, err = call_main(evaluate, best, "--episodes", "4", "--device", "cpu")
    assert code == 0 and "mean return" in out, err
    code, out, err = call_main(export, best, "--output", tmp_path / "policy.onnx")
    assert code == 0 and "state [N, 8]" in out and "state_out [N, 8]" in out, err
    code, _, err = call_main(export, best, "--output", tmp_path / "policy.pt")
    assert code == 0, err
    scripted = torch.jit.load(tmp_path / "policy.pt")
    action, state_out = scripted(torch.zeros(3, 4), torch.zeros(3, 8))
    assert action.shape == (3,) and state_out.shape == (3, 8)
    code, _, err = call_main(export, best, "--output", tmp_path / "q.onnx", "--quantize", "int8")
    assert code == 2 and "memory" in err and len(err.strip().splitlines()) == 1, err

    loaded = rl_gpu.load(best)
    assert loaded.is_recurrent and isinstance(loaded.policy, ComposedActorCritic)
    obs = torch.randn(5, 4)
    state = loaded.initial_state(5)
    actions, after = loaded.act_with_state(obs, state)
    out, expected = loaded.policy.act_with_state(obs, state, deterministic=True)
    assert torch.equal(actions, out.action) and torch.equal(after, expected)
    with pytest.raises(ValueError, match="act_with_state"):
        loaded.act(obs)
    with pytest.raises(ValueError, match=r"state must be real numbers of shape \[5, 2, 8\]"):
        loaded.act_with_state(obs, torch.zeros(5, 8))
    with pytest.raises(ValueError, match="state has NaN"):
        loaded.act_with_state(obs, state.clone().fill_(float("nan")))
    same, _ = loaded.act_with_state(obs, state.numpy())  # an array is taken too
    assert torch.equal(same, actions)
    code, _, err = call_main(train, "--env", "CartPole-v1", "--memory", "gru", "--memory-size", "65536",
                             "--output", tmp_path / "huge")
    assert code == 2 and "--memory-size must be a whole number from 1 to 4096" in err, err
    assert not (tmp_path / "huge").exists()
