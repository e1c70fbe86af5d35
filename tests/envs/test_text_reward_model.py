"""A text task's reward from a reward model (``Addition-v0?reward_model=FOLDER``): the score at a response's end is
the classifier's logit over the buffer, alone or added to the exact match; bad folders are refused in one line;
GRPO trains on it from the command line."""

from __future__ import annotations

import pytest
import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import make
from rl_gpu.envs.text.vocab import PAD

transformers = pytest.importorskip("transformers")


def _classifier(folder, vocab_size: int = 14, **overrides):
    config = dict(vocab_size=vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2, num_labels=1,
                  pad_token_id=PAD, bos_token_id=None, eos_token_id=None)
    config.update(overrides)
    torch.manual_seed(0)
    model = transformers.GPT2ForSequenceClassification(transformers.GPT2Config(**config)).eval()
    model.save_pretrained(folder)
    return model


def _play(env, seed: int):
    """One whole response per row of random legal tokens: ``(final rewards [N], the final buffers [N, L])``."""
    g = torch.Generator().manual_seed(seed)
    step = env.observe()
    for t in range(env.response_length):
        action = torch.multinomial(step.action_mask.float(), 1, generator=g).squeeze(1)
        step = env.step(action)
        if t < env.response_length - 1:
            assert bool((step.reward == 0).all()) and not bool(step.terminated.any())
    assert bool(step.terminated.all())
    return step.reward, step.final_obs[:, :-1].long()


def test_the_reward_is_the_classifier_s_score_of_the_buffer(tmp_path):
    model = _classifier(tmp_path / "rm")
    exact = make("Addition-v0?digits=1", num_envs=6, seed=3)
    scored = make(f"Addition-v0?digits=1&reward_model={tmp_path / 'rm'}", num_envs=6, seed=3)
    both = make(f"Addition-v0?digits=1&reward_model={tmp_path / 'rm'}&reward_mix=sum", num_envs=6, seed=3)
    match, tokens = _play(exact, 5)
    reward, same = _play(scored, 5)
    assert torch.equal(tokens, same)
    with torch.no_grad():
        expected = model(input_ids=tokens, attention_mask=(tokens != PAD).long()).logits[:, 0]
    torch.testing.assert_close(reward, expected)
    assert len(set(reward.tolist())) > 1
    summed, _ = _play(both, 5)
    torch.testing.assert_close(summed, expected + match)


@pytest.mark.parametrize("overrides, says", [
    ({"num_labels": 2}, "num_labels=2 (a reward model has 1)"),
    ({"vocab_size": 20}, "vocab_size=20 (this task's vocabulary has 14)"),
    ({"pad_token_id": 3}, "pad_token_id=3 (this task's <pad> is 0)"),
])
def test_a_classifier_that_does_not_fit_the_task_is_refused(tmp_path, overrides, says):
    _classifier(tmp_path / "rm", **overrides)
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)")):
        make(f"Addition-v0?digits=1&reward_model={tmp_path / 'rm'}", num_envs=2)


def test_what_is_not_a_reward_model_is_refused_in_one_line(tmp_path, call_main):
    from rl_gpu.cli.train import main as train

    (tmp_path / "empty").mkdir()
    for env_id, says in [(f"Addition-v0?reward_model={tmp_path / 'empty'}", "not a Hugging Face model folder"),
                         (f"Addition-v0?reward_model={tmp_path / 'none'}", "not a Hugging Face model folder"),
                         ("Addition-v0?reward_mix=max", "reward_mix must be 'model' or 'sum'")]:
        code, _, err = call_main(train, "--env", env_id, "--algo", "grpo", "--num-envs", "16", "--max-updates", "1",
                                 "--device", "cpu", "--output", tmp_path / "never")
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never").exists()


def test_grpo_trains_on_a_reward_model(tmp_path, call_main):
    from rl_gpu.cli.train import main as train

    _classifier(tmp_path / "rm")
    code, _, err = call_main(train, "--env", f"Addition-v0?digits=1&reward_model={tmp_path / 'rm'}&reward_mix=sum",
                             "--algo", "grpo", "--num-envs", "16", "--group-size", "4", "--hidden-sizes", "32", "32",
                             "--max-updates", "2", "--eval-every", "1", "--eval-episodes", "8",
                             "--final-eval-episodes", "8", "--device", "cpu", "--quiet", "--output", tmp_path / "run")
    assert code in (0, 1), err  # trained to the end (the goal may be out of reach)
    assert (tmp_path / "run" / "seed-11" / "best.pt").exists()
