"""Language models as policies: the transformer's key-value cache, GRPO's and RLOO's maths against hand-computed
values, generation's log-probabilities against the update's, what a batch of equal rewards teaches (nothing),
supervised warm start, exact resume, and the command line from SFT to GRPO to a held-out evaluation."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.lm.common import generate, response_log_probs
from rl_gpu.algos.lm.config import GRPOConfig, SFTConfig
from rl_gpu.algos.lm.grpo import GRPO
from rl_gpu.algos.lm.losses import clipped_token_loss, group_advantages, kl_k3, reduce_tokens
from rl_gpu.algos.lm.sft import SFT, answer_masks
from rl_gpu.envs.registry import make
from rl_gpu.envs.text.vocab import EOS, PAD
from rl_gpu.nn.kinds import build_policy
from rl_gpu.nn.transformer import TransformerPolicy

SMALL = (32, 32)


def _setup(n=16, env_id="Addition-v0?digits=1", **kw):
    return Setup(env=make(env_id, num_envs=n, seed=1), seed=2, learning_rate=kw.pop("lr", 1e-3),
                 hidden_sizes=kw.pop("hidden_sizes", SMALL), **kw)


def _next_iteration_and_its_resumed_twin(algo, build):
    """``(algo's next iteration, that of a fresh build() loaded from its state as a checkpoint holds it, the twin)``."""
    saved, env_state = copy.deepcopy(algo.state_dict()), copy.deepcopy(algo.env.state_dict())
    twin = build()
    twin.load_state_dict(saved)
    twin.env.load_state_dict(env_state)
    return algo.iterate(), twin.iterate(), twin


def test_group_advantages_by_hand():
    reward = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    std = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    grpo = group_advantages(reward, 4)
    assert torch.allclose(grpo, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]) / torch.tensor(
        [std + 1e-4] * 4 + [1.0] * 4))
    assert torch.equal(group_advantages(reward, 4, scale=False), torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))
    # RLOO: 1 - mean(0, 0, 1) = 2/3; 0 - mean(0, 1, 1) = -2/3
    rloo = group_advantages(reward, 4, leave_one_out=True)
    assert torch.allclose(rloo, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0]))


def test_token_losses_by_hand():
    new, old = torch.log(torch.tensor([[0.6, 0.25, 0.6]])), torch.log(torch.tensor([[0.4, 0.5, 0.4]]))
    loss, clipped = clipped_token_loss(new, old, torch.tensor([1.0]), 0.2)
    # ratios 1.5, 0.5, 1.5 with A = 1: -min(1.5, 1.2) = -1.2 (clipped), -min(0.5, 0.8) = -0.5
    assert torch.allclose(loss, torch.tensor([[-1.2, -0.5, -1.2]])) and clipped.tolist() == [[True, False, True]]
    loss, clipped = clipped_token_loss(new, old, torch.tensor([-1.0]), 0.2)
    # A = -1: -min(-1.5, -1.2) = 1.5 (not clipped), -min(-0.5, -0.8) = 0.8 (clipped)
    assert torch.allclose(loss, torch.tensor([[1.5, 0.8, 1.5]])) and clipped.tolist() == [[False, True, False]]
    kl = kl_k3(torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -2.0]))
    assert torch.allclose(kl, torch.tensor([math.exp(-1) + 1 - 1, 0.0]))
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    chosen = torch.tensor([[True, True, True], [True, False, False]])
    assert float(reduce_tokens(per_token, chosen, "token")) == pytest.approx(10 / 4)
    assert float(reduce_tokens(per_token, chosen, "sequence")) == pytest.approx((2 + 4) / 2)
    assert float(reduce_tokens(per_token, chosen, "constant")) == pytest.approx(10 / 6)


def test_the_cache_gives_the_full_passes_logits_and_the_kind_rebuilds():
    torch.manual_seed(0)
    env = make("Addition-v0", num_envs=6, seed=1)
    policy = TransformerPolicy(14, 8, 5, 64, 2, 2).eval()
    step = env.observe()
    with torch.no_grad():
        logits, cache = policy.start(step.obs[:, :8])
        for t in range(5):
            full = policy.act(step.obs, step.action_mask, deterministic=True)
            assert torch.allclose(torch.log_softmax(logits.masked_fill(~step.action_mask, -1e9), -1).gather(
                1, full.action[:, None])[:, 0], full.log_prob, atol=1e-5)
            step = env.step(full.action)
            if t < 4:
                logits = policy.next_logits(full.action, cache, 8 + t)
    twin = build_policy(policy.config())
    twin.load_state_dict(policy.state_dict())
    obs = env.observe().obs
    assert torch.equal(twin.act(obs, deterministic=True).action, policy.act(obs, deterministic=True).action)


def test_generation_and_the_update_agree_on_every_log_probability():
    algo = GRPO.from_setup(_setup(n=16), GRPOConfig(group_size=4, temperature=0.7))
    algo.env.group(4)
    responses = generate(algo.policy, algo.env, algo.rngs["sample"], temperature=0.7)
    log_prob, _ = response_log_probs(algo.policy, responses.tokens, responses.action_mask, temperature=0.7)
    assert torch.allclose(log_prob, responses.log_prob, atol=1e-5)  # the first epoch's ratios are 1
    after_eos = ~responses.chosen
    assert log_prob[after_eos].abs().max() < 1e-6 if after_eos.any() else True
    assert responses.tokens[:, 4:].tolist() != [[0] * 3] * 16


def test_prefix_sharing_gives_the_plain_passes_outputs():
    torch.manual_seed(3)
    policy = TransformerPolicy(14, 8, 5, 64, 2, 2)
    env = make("Addition-v0", num_envs=12, seed=2)
    env.group(4)
    responses = generate(policy, env, torch.Generator().manual_seed(0), group=4)
    assert torch.equal(responses.tokens[:, :8], responses.tokens[::4, :8].repeat_interleave(4, dim=0))
    for (a, b) in zip(policy.response_outputs(responses.tokens), policy.response_outputs(responses.tokens, 4)):
        assert torch.allclose(a, b, atol=1e-5)
    log_prob, _ = response_log_probs(policy, responses.tokens, responses.action_mask, 1.0, 4)
    log_prob.sum().backward()  # gradients flow through the shared prompt's keys and values
    assert torch.allclose(log_prob, responses.log_prob, atol=1e-5)
    assert policy.model.embed.weight.grad is not None


@pytest.mark.parametrize("group", [1, 4])
def test_gradient_checkpointing_gives_the_same_outputs_and_gradients(group):
    """Recomputing each block in the backward pass changes no number (plain and prefix-shared passes); the
    setting is the update's (GRPO's config), not the policy's."""
    torch.manual_seed(3)
    policy = TransformerPolicy(14, 8, 5, 64, 2, 2)
    env = make("Addition-v0", num_envs=8, seed=2)
    env.group(4)
    tokens = generate(policy, env, torch.Generator().manual_seed(0), group=4).tokens
    results = []
    for recompute in (False, True):
        policy.zero_grad()
        policy.model.gradient_checkpointing = recompute
        logits, values = policy.response_outputs(tokens, group)
        (logits.log_softmax(-1).mean() + values.square().mean()).backward()
        results.append((logits.detach(), values.detach(), [p.grad.clone() for p in policy.parameters()]))
    (l0, v0, g0), (l1, v1, g1) = results
    assert torch.equal(l0, l1) and torch.equal(v0, v1)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(g0, g1))
    algo = GRPO.from_setup(_setup(n=16), GRPOConfig(group_size=4, gradient_checkpointing=True))
    assert algo.policy.model.gradient_checkpointing and not algo.reference.model.gradient_checkpointing


def test_groups_of_equal_rewards_teach_nothing():
    # Without the KL term (whose gradient at the reference is float noise, which Adam would scale up).
    algo = GRPO.from_setup(_setup(n=16), GRPOConfig(group_size=4, kl_coef=0.0))
    before = copy.deepcopy(algo.policy.state_dict())
    algo.env.group(4)
    responses = generate(algo.policy, algo.env, algo.rngs["sample"])
    stats = algo.update(responses._replace(reward=torch.ones(16)))
    assert float(stats["mixed_groups"]) == 0.0 and float(stats["grad_norm"]) == 0.0
    assert all(torch.equal(before[k], v) for k, v in algo.policy.state_dict().items())


def test_sft_learns_the_answers_and_masks_after_eos():
    mask, chosen = answer_masks(torch.tensor([[3, EOS, PAD], [4, 5, EOS]]), 14)
    assert chosen.tolist() == [[True, True, False], [True, True, True]]
    assert mask[0, 2].tolist() == [i == PAD for i in range(14)] and not mask[1, 2, PAD]
    algo = SFT.from_setup(_setup(n=64, lr=3e-3), SFTConfig())
    first = float(algo.iterate()["loss"])
    for _ in range(40):
        last = algo.iterate()
    assert float(last["loss"]) < 0.6 * first and float(last["token_accuracy"]) > 0.5


def test_grpo_resumes_exactly():
    def build():
        return GRPO.from_setup(_setup(n=16), GRPOConfig(group_size=4, update_epochs=2, num_minibatches=2))

    algo = build()
    algo.iterate()
    a, b, twin = _next_iteration_and_its_resumed_twin(algo, build)
    assert all(float(a[k]) == float(b[k]) for k in ("loss", "kl", "episode_return"))
    assert all(torch.equal(v, twin.policy.state_dict()[k]) for k, v in algo.policy.state_dict().items())


@pytest.mark.parametrize("flags, needle", [
    (["--env", "CartPole-v1"], "text environments"),
    (["--group-size", "3"], "must divide"),
    (["--init", "nothing.pt"], "--init"),
    (["--num-steps", "7"], "--num-steps"),
    (["--eval-env", "Addition-v0?digits=2"], "differs from --env"),
])
def test_what_grpo_cannot_train_is_refused_in_one_line(tmp_path, call_main, flags, needle):
    from rl_gpu.cli.train import main as train

    args = {"--env": "Addition-v0", "--num-envs": "16"}
    pairs = dict(zip(flags[::2], flags[1::2]))
    if pairs.get("--init") == "nothing.pt":
        pairs["--init"] = str(tmp_path / "nothing.pt")
    args.update(pairs)
    code, _, err = call_main(train, "--algo", "grpo", *[x for kv in args.items() for x in kv], "--max-updates", "1",
                             "--min-updates", "1", "--device", "cpu", "--output", tmp_path / "never")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "never").exists()


def test_from_the_command_line_sft_then_grpo_then_held_out_evaluation(tmp_path, call_main):
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.train import main as train

    small = ["--hidden-sizes", "32", "32", "--eval-episodes", "16", "--final-eval-episodes", "16", "--device", "cpu",
             "--quiet"]
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "sft", "--num-envs", "32",
                             "--max-updates", "3", "--eval-every", "3", "--output", tmp_path / "sft", *small)
    assert code == 0, err
    sft = tmp_path / "sft" / "seed-11" / "best.pt"
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "grpo", "--init", sft,
                             "--num-envs", "32", "--group-size", "4", "--max-updates", "2", "--eval-every", "1",
                             "--output", tmp_path / "grpo", *small)
    assert code == 0, err
    saved = json.loads((tmp_path / "grpo" / "seed-11" / "config.json").read_text())
    assert saved["eval_env"] == "Addition-v0?digits=1&split=valid"
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "seed-11" / "metrics.jsonl").read_text().splitlines()]
    assert any("kl" in r and "mixed_groups" in r for r in rows)
    code, text, err = call_main(evaluate, tmp_path / "grpo" / "seed-11" / "best.pt", "--env",
                                "Addition-v0?digits=1&split=test", "--episodes", "32", "--device", "cpu")
    assert code == 0 and "Addition-v0?digits=1&split=test" in text and "mean return" in text, err
    code, _, err = call_main(evaluate, tmp_path / "grpo" / "seed-11" / "best.pt", "--env", "CartPole-v1",
                             "--device", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def _trained_checkpoint(tmp_path, call_main):
    from rl_gpu.cli.train import main as train

    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "sft", "--num-envs", "32",
                             "--max-updates", "2", "--eval-every", "2", "--hidden-sizes", "32", "32",
                             "--eval-episodes", "8", "--final-eval-episodes", "8", "--device", "cpu", "--quiet",
                             "--output", tmp_path / "sft")
    assert code == 0, err
    return tmp_path / "sft" / "seed-11" / "best.pt"


def test_onnx_export_generates_the_policys_responses(tmp_path, call_main):
    import onnxruntime as ort

    from rl_gpu.cli.export import main as export
    from rl_gpu.interop.policy_io import load_policy

    checkpoint = _trained_checkpoint(tmp_path, call_main)
    code, _, err = call_main(export, checkpoint, "--output", tmp_path / "policy.onnx")
    assert code == 0, err
    policy, _ = load_policy(checkpoint, torch.device("cpu"))
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    env = make("Addition-v0?digits=1&split=test", num_envs=32, seed=4)
    step = env.observe()
    for _ in range(3):
        ours = policy.act(step.obs, step.action_mask, deterministic=True).action
        theirs = session.run(None, {"obs": step.obs.float().numpy(), "action_mask": step.action_mask.numpy()})[0]
        assert ours.tolist() == theirs.tolist()
        step = env.step(ours)


def test_a_hugging_face_folder_computes_the_same_logits_and_reads_back(tmp_path, call_main):
    transformers = pytest.importorskip("transformers")
    from rl_gpu.cli.export import main as export
    from rl_gpu.interop.policy_io import load_policy
    from rl_gpu.nn.gpt2 import load_gpt2

    checkpoint = _trained_checkpoint(tmp_path, call_main)
    folder = tmp_path / "hf"
    code, text, err = call_main(export, checkpoint, "--format", "hf", "--output", folder)
    assert code == 0 and "GPT2LMHeadModel" in text, err
    code, _, err = call_main(export, checkpoint, "--format", "hf", "--output", folder)
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1
    policy, _ = load_policy(checkpoint, torch.device("cpu"))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(["3+4=", "9+9="], add_special_tokens=False, return_tensors="pt").input_ids
    env = make("Addition-v0?digits=1", num_envs=2)
    assert ids.tolist() == env.prompt(torch.tensor([[3, 4], [9, 9]])).tolist()
    assert tokenizer.decode([4, 5, 1]) == "23<eos>"
    tokens = torch.randint(2, 14, (4, 7))
    with torch.no_grad():
        ours = policy.model.lm_head(policy.model(tokens))
        assert torch.allclose(model(tokens).logits, ours, atol=1e-5)
        back = load_gpt2(folder, 4)
        assert torch.allclose(back.model.lm_head(back.model(tokens)), ours, atol=1e-6)
    # --init reads the folder: GRPO starts from the exported model.
    algo = GRPO.from_setup(_setup(n=8), GRPOConfig(group_size=4, init=str(folder)))
    assert torch.equal(algo.policy.model.embed.weight, policy.model.embed.weight)


def test_rlhf_token_rewards_and_advantages_by_hand():
    from rl_gpu.algos.lm.rlhf_ppo import token_rewards

    chosen = torch.tensor([[True, True, False], [True, True, True]])
    log_prob = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -2.0, 0.0], [-1.0, -3.0, -1.0]])
    reward = token_rewards(torch.tensor([1.0, 0.0]), log_prob, ref, chosen, 0.1)
    # -0.1 * (lp - ref) on chosen tokens; the score on each response's last chosen token
    assert torch.allclose(reward, torch.tensor([[-0.05, 1.0, 0.0], [0.0, -0.2, 0.0]]))
    from rl_gpu.algos.lm.config import RLHFPPOConfig
    from rl_gpu.algos.lm.rlhf_ppo import RLHFPPO

    def build():
        return RLHFPPO.from_setup(_setup(n=8), RLHFPPOConfig(num_minibatches=2, update_epochs=2, gae_lambda=1.0))

    algo = build()
    responses = generate(algo.policy, algo.env, algo.rngs["sample"])
    advantage, returns, _ = algo.advantages(responses)
    # gamma = lambda = 1: each chosen token's return is the sum of the rewards from it to the response's end
    _, _, value = algo._outputs(algo.reference, responses, slice(None))
    ref_lp = response_log_probs(algo.reference, responses.tokens, responses.action_mask)[0]
    r = token_rewards(responses.reward, responses.log_prob, ref_lp, responses.chosen, algo.config.kl_coef)
    expected = r.flip(1).cumsum(1).flip(1)
    assert torch.allclose(returns[responses.chosen], expected[responses.chosen], atol=1e-5)
    assert advantage[~responses.chosen].abs().max() == 0 if (~responses.chosen).any() else True
    algo.iterate()
    a, b, twin = _next_iteration_and_its_resumed_twin(algo, build)
    assert float(a["loss"]) == float(b["loss"]) and float(a["kl"]) == float(b["kl"])


def test_bf16_updates_follow_fp32():
    fp32 = GRPO.from_setup(_setup(n=16), GRPOConfig(group_size=4))
    bf16 = GRPO.from_setup(_setup(n=16, precision="bf16"), GRPOConfig(group_size=4))
    assert bf16.precision == "bf16" and fp32.precision == "fp32"
    fp32.env.group(4)
    responses = generate(fp32.policy, fp32.env, fp32.rngs["sample"])
    a, b = fp32.update(responses), bf16.update(responses)
    assert abs(float(a["loss"]) - float(b["loss"])) < 0.05 and abs(float(a["entropy"]) - float(b["entropy"])) < 0.05
    for p in bf16.policy.parameters():
        assert p.dtype == torch.float32  # master weights stay fp32


def test_a_paused_grpo_run_resumes_to_the_run_never_paused(tmp_path):
    import dataclasses

    from rl_gpu.cli.presets import preset_config
    from rl_gpu.runtime.checkpoint import load_checkpoint
    from rl_gpu.training.runner import VOLATILE_METRICS, resume, train

    def config(out):
        base = preset_config("Addition-v0?digits=1", "grpo")
        return dataclasses.replace(base, device="cpu", seeds=(5,), num_envs=32, hidden_sizes=(32, 32), max_updates=5,
                                   min_updates=5, eval_every=2, eval_episodes=16, final_eval_episodes=16,
                                   checkpoint_every=2, output=out, total_timesteps=None, solve_threshold=2.0,
                                   algo_params=dataclasses.replace(base.algo_params, group_size=4))

    def rows(run):
        out = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in VOLATILE_METRICS} for r in out]

    quiet = lambda *a, **k: None  # noqa: E731
    train(config(tmp_path / "a"), log=quiet)
    (paused,) = train(config(tmp_path / "b"), log=quiet, stop_after=3)
    assert paused.status == "paused"
    resume(tmp_path / "b" / "seed-5", config(tmp_path / "b"), log=quiet)
    a, b = (load_checkpoint(tmp_path / run / "seed-5" / "last.pt")["trainer"]["algorithm"] for run in "ab")
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert torch.equal(a["sample_rng"], b["sample_rng"]) and rows(tmp_path / "a" / "seed-5") == rows(
        tmp_path / "b" / "seed-5")


def test_the_throughput_benchmark_measures_a_small_model():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "llm" / "grpo_throughput.py"
    spec = importlib.util.spec_from_file_location("grpo_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = module.one("32x1", "cpu", 16, 1, 4)
    assert row["params"] > 0 and row["tokens_per_s"] > 0 and row["update_s"] > 0 and row["peak_mib"] > 0


def test_lora_trains_adapters_only_and_exports_merged(tmp_path, call_main):
    pytest.importorskip("peft")
    from rl_gpu.cli.export import main as export
    from rl_gpu.cli.train import main as train
    from rl_gpu.interop.policy_io import load_policy

    checkpoint = _trained_checkpoint(tmp_path, call_main)
    out = tmp_path / "lora"
    # SFT: a gradient from the first update (a barely trained start earns GRPO no reward to learn from)
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "sft", "--init", checkpoint,
                             "--lora-rank", "4", "--num-envs", "32", "--max-updates", "2",
                             "--eval-every", "2", "--hidden-sizes", "32", "32", "--eval-episodes", "8",
                             "--final-eval-episodes", "8", "--device", "cpu", "--quiet", "--output", out)
    assert code == 0, err
    start, _ = load_policy(checkpoint, torch.device("cpu"))
    tuned, _ = load_policy(out / "seed-11" / "last.pt", torch.device("cpu"))
    assert tuned.lora_rank == 4 and tuned.config()["lora_rank"] == 4
    frozen = {k: v for k, v in tuned.model.state_dict().items() if "base_layer" in k}
    for name, value in frozen.items():  # the model's own weights did not move
        assert torch.equal(value, start.model.state_dict()[name.replace(".base_layer", "")]), name
    assert any(v.abs().sum() > 0 for k, v in tuned.model.state_dict().items() if "lora_B" in k)  # adapters did
    obs = make("Addition-v0?digits=1", num_envs=16, seed=3).observe().obs
    merged = tuned.merged()
    assert merged.lora_rank == 0 and torch.allclose(merged.model.lm_head(merged._newest(obs)),
                                                    tuned.model.lm_head(tuned._newest(obs)), atol=1e-5)
    code, _, err = call_main(export, out / "seed-11" / "last.pt", "--output", tmp_path / "lora.onnx")
    assert code == 0, err
