"""The ``hf_causal_lm`` kind: a Hugging Face causal LM (a tiny Llama built from a config here; nothing is
downloaded) as a text task's policy: cached generation equal to the full causal pass, act and evaluate agreeing,
checkpoints rebuilt through the checked path (hostile configurations refused), and SFT -> GRPO -> evaluate ->
export from the command line."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from rl_gpu.nn.hf_causal import HFCausalLMPolicy, load_hf_folder, plain_config  # noqa: E402
from rl_gpu.nn.rebuild import rebuild_policy  # noqa: E402
from rl_gpu.runtime.checkpoint import CheckpointError  # noqa: E402

VOCAB, P, R = 14, 4, 3


def _llama(**overrides):
    config = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0, bos_token_id=None,
                  eos_token_id=1, tie_word_embeddings=False)
    config.update(overrides)
    return transformers.LlamaConfig(**config)


def _policy(seed: int = 0) -> HFCausalLMPolicy:
    torch.manual_seed(seed)
    return HFCausalLMPolicy(plain_config(_llama()), P, R).eval()


def test_cached_generation_is_the_full_causal_pass():
    policy = _policy()
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(2, VOCAB, (3, P), generator=g).repeat_interleave(2, dim=0)  # groups of 2
    response = torch.randint(2, VOCAB, (6, R), generator=g)
    tokens = torch.cat([prompt, response], dim=1)
    with torch.no_grad():
        full = policy.response_logits(tokens, group=2)
        first, cache = policy.start(prompt, group=2)
        steps = [first] + [policy.next_logits(response[:, t], cache, P + t) for t in range(R - 1)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_act_and_evaluate_agree_at_the_newest_token():
    policy = _policy()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(2, VOCAB, (5, P + R), generator=g)
    written = torch.tensor([0, 1, 2, 1, 0])
    obs = torch.cat([tokens, written.unsqueeze(1)], dim=1).to(torch.uint8)
    with torch.no_grad():
        out = policy.act(obs, None, torch.Generator().manual_seed(3))
        log_prob, entropy, value = policy.evaluate(obs, out.action)
        logits = policy.model(input_ids=tokens).logits
    torch.testing.assert_close(log_prob, out.log_prob)
    torch.testing.assert_close(value, out.value)
    newest = logits[torch.arange(5), P + written - 1]
    torch.testing.assert_close(log_prob, torch.log_softmax(newest, -1)[torch.arange(5), out.action])
    assert bool((entropy > 0).all())


def test_a_checkpoint_rebuilds_through_the_checked_path(tmp_path):
    policy = _policy()
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    rebuilt = rebuild_policy(policy.config(), state, tmp_path / "x.pt")
    tokens = torch.randint(2, VOCAB, (2, P + R))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.response_logits(tokens), policy.response_logits(tokens))
    for config, says in [
        ({**policy.config(), "hf_config": {**policy.hf_config, "model_type": "no_such_model"}}, "hf_config"),
        ({**policy.config(), "hf_config": {**policy.hf_config, "auto_map": {"AutoModelForCausalLM": "x.Y"},
                                           "model_type": "custom"}}, "hf_config"),
        ({**policy.config(), "hf_config": "llama"}, "expected an object of plain JSON values"),
        ({**policy.config(), "hf_config": {**policy.hf_config, "hidden_size": 64}}, "has shape"),
    ]:
        with pytest.raises(CheckpointError, match=says):
            rebuild_policy(config, state, tmp_path / "x.pt")


def test_a_folder_of_another_causal_lm_loads_and_bad_folders_are_refused(tmp_path):
    from rl_gpu.core.errors import UsageError

    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32,
                                                                n_layer=1, n_head=2)).eval()  # tied: not ours
    gpt2.save_pretrained(tmp_path / "gpt2")
    policy = load_hf_folder(tmp_path / "gpt2", P, R).eval()
    tokens = torch.randint(2, VOCAB, (2, P + R))
    with torch.no_grad():
        torch.testing.assert_close(policy.response_logits(tokens), gpt2(tokens[:, :-1]).logits[:, P - 1:])
    with pytest.raises(UsageError, match="not a Hugging Face causal language model folder"):
        load_hf_folder(tmp_path, P, R)
    with pytest.raises(UsageError, match="reads at most 4 positions"):
        transformers.LlamaForCausalLM(_llama(max_position_embeddings=4)).save_pretrained(tmp_path / "short")
        load_hf_folder(tmp_path / "short", P, R)


def test_sft_grpo_evaluate_and_export_from_the_command_line(tmp_path, call_main):
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.export import main as export
    from rl_gpu.cli.train import main as train

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(_llama()).save_pretrained(tmp_path / "llama")
    small = ["--eval-episodes", "8", "--final-eval-episodes", "8", "--device", "cpu", "--quiet"]
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "sft", "--init", tmp_path / "llama",
                             "--num-envs", "16", "--max-updates", "2", "--eval-every", "2", "--output",
                             tmp_path / "sft", *small)
    assert code in (0, 1), err
    sft = tmp_path / "sft" / "seed-11" / "best.pt"
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "grpo", "--init", sft, "--num-envs",
                             "16", "--group-size", "4", "--max-updates", "1", "--eval-every", "1", "--output",
                             tmp_path / "grpo", *small)
    assert code in (0, 1), err
    best = tmp_path / "grpo" / "seed-11" / "best.pt"
    code, text, err = call_main(evaluate, best, "--episodes", "8", "--device", "cpu")
    assert code == 0 and "mean return" in text, err
    code, text, err = call_main(export, best, "--format", "hf", "--output", tmp_path / "hf")
    assert code == 0 and "LlamaForCausalLM" in text, err
    import rl_gpu

    loaded = rl_gpu.load(best).policy
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokens = torch.randint(2, VOCAB, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(back(tokens).logits, loaded.model(input_ids=tokens).logits)
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "grpo", "--init", tmp_path / "llama",
                             "--lora-rank", "2", "--num-envs", "16", "--group-size", "4", "--max-updates", "1",
                             "--eval-every", "1", "--output", tmp_path / "lora", *small)
    assert code in (0, 1), err
    adapted = rl_gpu.load(tmp_path / "lora" / "seed-11" / "best.pt").policy
    assert adapted.config()["lora_rank"] == 2
    code, text, err = call_main(export, tmp_path / "lora" / "seed-11" / "best.pt", "--format", "hf", "--output",
                                tmp_path / "hf_lora")
    assert code == 0, err
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf_lora").eval()  # plain layers
    assert not any("lora_" in name for name, _ in back.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(back(tokens).logits, adapted.model(input_ids=tokens).logits)
    code, _, err = call_main(train, "--env", "Addition-v0?digits=1", "--algo", "grpo", "--init", tmp_path / "llama",
                             "--lora-rank", "64", "--num-envs", "16", "--max-updates", "1", "--output",
                             tmp_path / "never", *small)
    assert code == 2 and "--lora-rank must be between 1 and the model's width 32, got 64" in err, err
    assert not (tmp_path / "never").exists()


def test_lora_adapters_train_alone_start_at_the_model_and_fold_back_into_it(tmp_path):
    from rl_gpu.core.errors import UsageError

    policy = _policy()
    adapted = _policy().add_lora(4)
    tokens = torch.randint(2, VOCAB, (3, P + R))
    with torch.no_grad():
        torch.testing.assert_close(adapted.response_logits(tokens), policy.response_logits(tokens))
        trainable = {name for name, p in adapted.named_parameters() if p.requires_grad}
        assert trainable and all("lora_" in name or name.startswith("value_head") for name in trainable)
        assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable if "lora_" in name} == {
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
        moved = adapted.response_logits(tokens)
        assert not torch.allclose(moved, policy.response_logits(tokens))
        merged = adapted.merged()
        assert "lora_rank" not in merged.config() and not any("lora_" in n for n, _ in merged.named_parameters())
        torch.testing.assert_close(merged.response_logits(tokens), moved, atol=1e-5, rtol=1e-5)
        state = {k: v.clone() for k, v in adapted.state_dict().items()}
        rebuilt = rebuild_policy(adapted.config(), state, tmp_path / "x.pt")
        torch.testing.assert_close(rebuilt.response_logits(tokens), moved)
    for rank in (0, 33, True):
        with pytest.raises(UsageError, match="--lora-rank must be between 1 and the model's width 32"):
            _policy().add_lora(rank)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        adapted.add_lora(2)
