"""Task sequences (rl_gpu.training.continual, rl-gpu continual): the measures against hand-computed values, the L2
and EWC penalties (value, gradient, Fisher) against autograd, the phases' batches, and a short sequence through
the CLI that writes its records and refuses bad input in one line."""

import json
import math

import pytest
import torch

from rl_gpu.algos.anchor import Anchor, fisher_diagonal, make_anchor, trainable
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.training.continual import Sequence, across_seeds, auc_transfer, curve_area, measures, validation_curve

TASKS = ("CartPole-v1", "CartPole-v1?action_perm=1,0", "CartPole-v1?length=1.0")


def test_measures_follow_their_definitions():
    p = [[0.9, 0.1, 0.5],
         [0.2, 0.8, 0.4],
         [0.6, 0.3, 0.7]]
    m = measures(p, initial=[0.0, 0.0, 0.1])
    assert m["average_performance"] == pytest.approx((0.6 + 0.3 + 0.7) / 3)
    assert m["forgetting_per_task"] == pytest.approx([0.9 - 0.6, 0.8 - 0.3])
    assert m["forward_transfer_per_task"] == pytest.approx([0.1 - 0.0, 0.4 - 0.1])
    assert m["final_task_performance"] == 0.7
    summary = across_seeds([m, {**m, "forgetting": m["forgetting"] + 0.2}])
    assert summary["forgetting"]["mean"] == pytest.approx(m["forgetting"] + 0.1)
    assert summary["forgetting"]["ci95"] == pytest.approx(1.959964 * (0.2 / 2 ** 0.5) / 2 ** 0.5)


def test_phases_train_one_task_or_rehearse_the_earlier_ones():
    seq = Sequence(TASKS, 1000)
    assert seq.phase_id(1) == "multitask:CartPole-v1@0|CartPole-v1?action_perm=1,0@1|CartPole-v1?length=1.0@0"
    rehearse = Sequence(TASKS, 1000, method="rehearsal", rehearsal_share=0.2)
    assert rehearse.phase_id(2).endswith("CartPole-v1@0.1|CartPole-v1?action_perm=1,0@0.1|CartPole-v1?length=1.0@0.8")
    assert Sequence(TASKS, 1000, task_id=False).task_only(0).startswith("multitask-noid:CartPole-v1@1|")


def test_the_penalty_and_its_gradient_agree_with_autograd():
    torch.manual_seed(0)
    policy = ActorCritic(5, 3, (8,))
    obs = torch.randn(32, 5)
    fisher = fisher_diagonal(policy, obs, None, torch.Generator().manual_seed(1))
    critic = {id(p) for p in policy.critic.parameters()}
    for p, f in zip(policy.parameters(), fisher):
        assert (f == 0).all() if id(p) in critic else (f > 0).any()
    anchor = make_anchor("ewc", policy, 3.0, fisher)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    params = list(policy.parameters())
    expected = 3.0 * sum((f * (p - r).square()).sum() for p, r, f in zip(params, anchor.reference, fisher))
    assert float(anchor.penalty()) == pytest.approx(float(expected.detach()), rel=1e-6)
    grads = torch.autograd.grad(expected, params)
    for p in params:
        p.grad = None
    anchor.add_grad()
    for p, g in zip(params, grads):
        torch.testing.assert_close(p.grad, g)
    l2 = make_anchor("l2", policy, 1.0, fisher)
    assert all(torch.equal(w, (f > 0).float()) for w, f in zip(l2.weights, fisher))


def test_the_fisher_is_the_mean_of_per_state_squared_gradients():
    torch.manual_seed(1)
    policy = ActorCritic(3, 2, (4,))
    obs = torch.randn(6, 3)
    fisher = fisher_diagonal(policy, obs, None, torch.Generator().manual_seed(2))
    actions = policy.act(obs, None, torch.Generator().manual_seed(2)).action
    params = list(policy.actor.parameters())
    total = [torch.zeros_like(p) for p in params]
    for i in range(6):
        g = torch.autograd.grad(policy.evaluate(obs[i:i + 1], actions[i:i + 1])[0].sum(), params)
        total = [t + x.square() / 6 for t, x in zip(total, g)]
    by_id = {id(p): f for p, f in zip(policy.parameters(), fisher)}
    for p, t in zip(params, total):
        torch.testing.assert_close(by_id[id(p)], t)


def _closed_form_fisher(params, means, log_stds):
    """``sum_d (d mean_d / d theta)^2 / std_d^2 + 2 (d log_std_d / d theta)^2``: a diagonal Gaussian's Fisher."""
    total = [torch.zeros_like(p) for p in params]
    for d in range(means.shape[-1]):
        g_mean = torch.autograd.grad(means[0, d], params, retain_graph=True, allow_unused=True)
        inv_var = float(torch.exp(-2.0 * log_stds[0, d].detach()))
        g_std = (torch.autograd.grad(log_stds[0, d], params, retain_graph=True, allow_unused=True)
                 if log_stds.requires_grad else [None] * len(params))
        for t, gm, gs in zip(total, g_mean, g_std):
            if gm is not None:
                t.add_(gm.square() * inv_var)
            if gs is not None:
                t.add_(2.0 * gs.square())
    return total


@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_an_off_policy_actor_s_fisher_is_its_exploring_gaussian_s(kind):
    """EWC on SAC's actor weighs it by the Fisher of its pre-squash Gaussian (tanh and the bounds are a fixed
    bijection of the action), on TD3's by that of its exploration noise: the sampled estimate converges to the
    closed form."""
    from rl_gpu.nn.squashed import DeterministicActor, SquashedGaussianActor

    torch.manual_seed(3)
    if kind == "sac":
        actor = SquashedGaussianActor(3, 2, (5,), action_low=[-2.0, 0.0], action_high=[2.0, 1.0])
    else:
        actor = DeterministicActor(3, 2, (5,), action_low=[-2.0, 0.0], action_high=[2.0, 1.0],
                                   exploration_noise=0.3)
    obs = torch.randn(1, 3)
    fisher = fisher_diagonal(actor, obs.expand(4000, 3), None, torch.Generator().manual_seed(4))
    params = trainable(actor)
    x = actor.preprocess(obs)
    if kind == "sac":
        means, log_stds = actor.heads(x)
    else:
        means = actor.squashed(x)
        log_stds = torch.full_like(means, math.log(0.3))
    expected = _closed_form_fisher(params, means, log_stds)
    flat, want = torch.cat([f.flatten() for f in fisher]), torch.cat([e.flatten() for e in expected])
    assert float(want.abs().max()) > 0
    assert float((flat - want).abs().sum() / want.abs().sum()) < 0.06
    if kind == "td3":
        actor.exploration_noise = 0.0
        with pytest.raises(ValueError, match="exploration_noise > 0"):
            fisher_diagonal(actor, obs, None, torch.Generator())


def test_an_anchor_needs_matching_lists():
    with pytest.raises(ValueError):
        Anchor([torch.zeros(1)], [], [], 1.0)


def test_a_short_sequence_writes_its_records(call_main, tmp_path):
    from rl_gpu.cli.continual import main

    out = tmp_path / "seq"
    code, text, err = call_main(main, "--tasks", "CartPole-v1", "CartPole-v1?action_perm=1,0", "--steps-per-task",
                                "2048", "--method", "ewc", "--anchor-coef", "10", "--eval-episodes", "8", "--measure",
                                "return",
                                "--fisher-states", "16", "--device", "cpu", "--output", out, "--fixed",
                                "num_envs=16", "eval_episodes=4", "final_eval_episodes=4")
    assert code == 0, err
    record = json.loads((out / "continual-seed-1.json").read_text())
    assert len(record["performance"]) == 2 and len(record["performance"][0]) == 2
    assert record["success_return"] == 475.0 and "forgetting" in record and "forward_transfer" in record
    assert record["initial"] == [0.0, 0.0]  # the untrained policy is the normalised return's 0
    assert all(0.0 <= v <= 1.0 for row in record["performance"] for v in row)
    assert (out / "phase-1" / "seed-1" / "summary.json").exists()
    assert json.loads((out / "phase-1" / "seed-1" / "config.json").read_text())["env"].startswith("multitask:")
    summary = json.loads((out / "continual.json").read_text())
    assert summary["method"] == "ewc" and set(summary["forgetting"]) == {"mean", "ci95", "values"}
    assert "forgetting" in text


@pytest.mark.parametrize("args, says", [
    (["--tasks", "CartPole-v1"], "give 2 to 64 tasks"),
    (["--tasks", "CartPole-v1", "Acrobot-v1"], "observation shape"),
    (["--tasks", "CartPole-v1", "CartPole-v1|x"], "no '|' or '@'"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--anchor-coef", "nan"], "--anchor-coef"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--rehearsal-share", "1"], "--rehearsal-share"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--fixed", "total_timesteps=5"], "the sequence sets it"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--fixed", "bogus=1"], "bogus"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--steps-per-task", "0"], "--steps-per-task"),
    (["--tasks", "CartPole-v1", "Pendulum-v1"], "observation shape"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--measure", "bogus"], "--measure"),
    (["--tasks", "Pendulum-v1", "Pendulum-v1?g=5.0", "--algo", "impala", "--method", "ewc"],
     "holds the actor of --algo ppo, sac or td3, not --algo impala"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--method", "replay"], "keeps the replay buffer of --algo sac or td3"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--transfer-reference"], "needs --measure return"),
    (["--tasks", "CartPole-v1", "CartPole-v1", "--transfer-reference", "--measure", "return", "--method",
      "rehearsal"], "not rehearsal"),
])
def test_bad_sequences_are_refused_in_one_line(call_main, tmp_path, args, says):
    from rl_gpu.cli.continual import main

    code, text, err = call_main(main, *args, "--output", tmp_path / "bad", "--device", "cpu")
    assert code == 2 and says in err and len(err.strip().splitlines()) <= 2, err
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_an_off_policy_sequence_carries_every_network(call_main, tmp_path, monkeypatch):
    from rl_gpu.cli.continual import main
    from rl_gpu.training import continual

    carried = []
    real = continual.networks
    monkeypatch.setattr(continual, "networks", lambda algo: carried.append(sorted(real(algo))) or real(algo))
    code, text, err = call_main(main, "--tasks", "Pendulum-v1", "Pendulum-v1?g=5.0", "--algo", "sac",
                                "--steps-per-task", "256", "--measure", "return", "--eval-episodes", "2",
                                "--device", "cpu", "--output", tmp_path / "sac", "--fixed", "num_envs=4",
                                "eval_episodes=2", "final_eval_episodes=2", "learning_starts=32")
    assert code == 0, err
    assert carried and all(names == ["critic", "log_alpha", "policy", "target_critic"] for names in carried)


def test_replay_keeps_the_earlier_tasks_transitions_in_the_buffer(call_main, tmp_path, monkeypatch):
    """``--method replay``: phase 1's buffer starts with phase 0's transitions (their task one-hot) and adds its own;
    fine-tuning's starts empty."""
    from rl_gpu.cli.continual import main
    from rl_gpu.training import runner

    real, ends = runner.train, []

    def train(config, prepare_trainer):
        seen = []
        results = real(config, prepare_trainer=lambda t: (prepare_trainer(t), seen.append(t)))
        ends.append(seen[-1].algo.buffer.state_dict())
        return results

    monkeypatch.setattr(runner, "train", train)

    def buffer_after(method: str) -> dict:
        ends.clear()
        code, _, err = call_main(main, "--tasks", "Pendulum-v1", "Pendulum-v1?action_sign=-1", "--algo", "td3",
                                 "--method", method, "--steps-per-task", "128", "--measure", "return",
                                 "--eval-episodes", "2", "--device", "cpu", "--output", tmp_path / method,
                                 "--fixed", "num_envs=4", "eval_episodes=2", "final_eval_episodes=2",
                                 "learning_starts=32")
        assert code == 0 and len(ends) == 2, err
        return ends[1]

    kept, fresh = buffer_after("replay"), buffer_after("finetune")
    assert kept["rows_written"] == 2 * fresh["rows_written"] == 2 * 128 // 4
    task = kept["obs"][:, -2:]  # the batch's task one-hot: phase 0's rows first, then phase 1's
    half = kept["obs"].shape[0] // 2
    assert bool((task[:half, 0] == 1).all()) and bool((task[half:, 1] == 1).all())
    assert bool((fresh["obs"][:, -1] == 1).all())


def test_continual_world_s_forward_transfer_is_the_area_between_the_curves(tmp_path):
    same = curve_area([(0, 0.2), (50, 0.6), (100, 1.0)], 100, lambda v: v)
    assert same == pytest.approx((50 * 0.4 + 50 * 0.8) / 100)
    # The first validation held back to step 0, the last on to the span; the normaliser applied to each.
    held = curve_area([(20, 10.0), (60, 30.0)], 100, lambda v: v / 100)
    assert held == pytest.approx((20 * 0.1 + 40 * 0.2 + 40 * 0.3) / 100)
    assert curve_area([], 100, lambda v: v) == 0.0
    assert auc_transfer([0.8, 0.3, 0.9], [0.5, 0.4, 1.0]) == pytest.approx([0.6, -1 / 6, 0.0])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"update": 0, "global_step": 0, "validation": {"score": -5.0}}\n'
                       '{"update": 1, "global_step": 64, "loss": 1.0}\n'
                       '{"update": 2, "global_step": 128, "validation": {"score": 3.5, "passed": false}}\n')
    assert validation_curve(tmp_path) == [(0, -5.0), (128, 3.5)]


def test_transfer_reference_trains_each_task_alone(call_main, tmp_path):
    from rl_gpu.cli.continual import main

    out = tmp_path / "seq"
    code, text, err = call_main(main, "--tasks", "CartPole-v1", "CartPole-v1?action_perm=1,0", "--steps-per-task",
                                "1024", "--eval-episodes", "8", "--measure", "return", "--transfer-reference",
                                "--device", "cpu", "--output", out, "--fixed", "num_envs=16", "eval_episodes=4",
                                "final_eval_episodes=4", "eval_every=2")
    assert code == 0, err
    record = json.loads((out / "continual-seed-1.json").read_text())
    assert len(record["auc"]) == len(record["auc_alone"]) == len(record["forward_transfer_auc_per_task"]) == 2
    assert all(0.0 <= v <= 1.0 for v in record["auc"] + record["auc_alone"])
    assert record["forward_transfer_auc"] == pytest.approx(sum(record["forward_transfer_auc_per_task"]) / 2)
    for j in range(2):
        assert len(validation_curve(out / f"alone-{j}" / "seed-1")) >= 2
    summary = json.loads((out / "continual.json").read_text())
    assert "forward_transfer_auc" in summary and "forward transfer auc" in text
