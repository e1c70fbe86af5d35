"""Text generation as an environment (``Addition-v0``): prompts, reference answers and splits against plain Python,
every transition against a scalar reference game with the same injected state and tokens, the masks that make a
response's end static, and GRPO's grouping."""

from __future__ import annotations

import random

import pytest
import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import make
from rl_gpu.envs.text.addition import AdditionEnv, split_keys, split_of
from rl_gpu.envs.text.generation import TokenEnv, TokenState
from rl_gpu.envs.text.vocab import EOS, PAD, CharVocab

CHARS = "0123456789+="


def _token(char: str) -> int:
    return CHARS.index(char) + 2


class ScalarAddition:
    """One addition problem answered a token at a time, in plain Python (the reference of the batched task)."""

    def __init__(self, a: int, b: int, digits: int) -> None:
        self.a, self.b, self.digits = a, b, digits
        self.response: list[int] = []
        self.ended = False

    @property
    def prompt(self) -> list[int]:
        return [_token(c) for c in f"{self.a:0{self.digits}d}+{self.b:0{self.digits}d}="]

    def legal(self) -> list[bool]:
        return [t == PAD if self.ended else t != PAD for t in range(len(CHARS) + 2)]

    def step(self, token: int) -> tuple[float, bool]:
        self.response.append(token)
        self.ended = self.ended or token == EOS
        done = len(self.response) == self.digits + 2
        answer = [_token(c) for c in f"{self.a + self.b:0{self.digits + 1}d}"] + [EOS]
        return (1.0 if done and self.response == answer else 0.0), done


def _scalar_split(a: int, b: int, digits: int) -> str:
    bucket = ((a * 10 ** digits + b) * 2654435761 % 2 ** 32) * 10 // 2 ** 32
    return ("test", "valid")[bucket] if bucket < 2 else "train"


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_every_transition_equals_the_scalar_game(digits):
    rng = random.Random(digits)
    env = make(f"Addition-v0?digits={digits}", num_envs=16, seed=3)
    length = 3 * digits + 4
    for episode in range(3):
        problems = [(rng.randrange(10 ** digits), rng.randrange(10 ** digits)) for _ in range(16)]
        games = [ScalarAddition(a, b, digits) for a, b in problems]
        problem = torch.tensor(problems)
        env.set_rows(torch.arange(16), env.initial_state(env._sample_initial_state(16, env.generator)).inner._replace(
            problem=problem, tokens=torch.cat([env.prompt(problem), torch.zeros(16, digits + 2, dtype=torch.long)], 1)))
        step = env.observe()
        for t in range(digits + 2):
            assert step.obs[:, :2 * digits + 2].tolist() == [g.prompt for g in games]
            assert step.obs[:, length].tolist() == [t] * 16
            assert step.action_mask.tolist() == [g.legal() for g in games]
            # The answer's tokens for some rows, a wrong digit or an early <eos> for others.
            action = []
            for i, g in enumerate(games):
                answer = [_token(c) for c in f"{g.a + g.b:0{digits + 1}d}"] + [EOS]
                choice = answer[t] if i % 3 == 0 else rng.choice([i for i, ok in enumerate(g.legal()) if ok])
                action.append(choice)
            expected = [g.step(a) for g, a in zip(games, action)]
            step = env.step(torch.tensor(action))
            assert step.reward.tolist() == [r for r, _ in expected]
            assert step.terminated.tolist() == [d for _, d in expected] and not step.truncated.any()
        assert [g.response for g in games] == step.final_obs[:, 2 * digits + 2:length].tolist()
        assert step.obs[:, length].eq(0).all()  # every row started its next response
        assert all(step.reward[::3] == 1.0)  # the rows that wrote the answer


def test_prompts_answers_and_splits_equal_plain_python():
    env = make("Addition-v0", num_envs=512, seed=0)
    problem = env.state.inner.problem
    for (a, b), prompt, answer in zip(problem.tolist(), env.prompt(problem).tolist(), env.answer(problem).tolist()):
        assert env.vocab.decode(prompt) == f"{a:03d}+{b:03d}="
        assert env.vocab.decode(answer) == f"{a + b:04d}" and answer[-1] == EOS
        assert _scalar_split(a, b, 3) == "train"
    sizes = {}
    for split in ("train", "valid", "test"):
        keys = split_keys(2, split, torch.device("cpu"))
        sizes[split] = keys.numel()
        assert all(_scalar_split(k // 100, k % 100, 2) == split for k in keys.tolist())
        drawn = make(f"Addition-v0?digits=2&split={split}", num_envs=256, seed=1).state.inner.problem
        assert split_of(drawn[:, 0], drawn[:, 1], 2).eq(("test", "valid", "train").index(split)).all()
    assert sum(sizes.values()) == 10 ** 4 and 800 < sizes["test"] < 1200 and 800 < sizes["valid"] < 1200


def test_a_response_ends_at_its_eos_and_its_score_needs_it():
    env = make("Addition-v0?digits=1", num_envs=3, seed=0)
    problem = torch.tensor([[3, 4], [9, 9], [0, 0]])
    env.set_rows(torch.arange(3), TokenState(problem, torch.cat([env.prompt(problem), torch.zeros(3, 3).long()], 1),
                                            torch.zeros(3).long(), torch.zeros(3).bool()))
    script = [[_token("0"), _token("7"), EOS], [_token("1"), _token("8"), _token("8")], [EOS, PAD, PAD]]
    for t in range(3):
        step = env.step(torch.tensor([row[t] for row in script]))
        if t == 0:
            assert step.action_mask[2].tolist() == [i == PAD for i in range(14)]  # after <eos>: <pad> only
            assert not step.action_mask[0, PAD]
    assert step.reward.tolist() == [1.0, 0.0, 0.0] and step.terminated.all()
    assert env.decode(step.final_obs) == ["07", "188", ""]  # 9 + 9 = 18 written without its <eos>: no reward


def test_groups_share_their_first_rows_problem():
    env = make("Addition-v0", num_envs=12, seed=5)
    env.group(4)
    problem = env.state.inner.problem
    assert torch.equal(problem, problem[::4].repeat_interleave(4, dim=0))
    assert torch.equal(env.observe().obs, env.observe().obs[::4].repeat_interleave(4, dim=0))


@pytest.mark.parametrize("env_id, needle", [("Addition-v0?split=holdout", "split must be"),
                                            ("Addition-v0?digits=4", "digits must be"),
                                            ("Addition-v0?digits=0", "digits must be")])
def test_bad_parameters_are_refused_in_one_line(env_id, needle):
    with pytest.raises(UsageError, match=needle) as info:
        make(env_id, num_envs=2)
    assert "\n" not in str(info.value)


def test_the_env_is_a_tensor_env_of_uint8_token_buffers():
    env = AdditionEnv(num_envs=2, seed=0)
    spec = env.spec
    assert spec.obs_shape == (14,) and spec.num_actions == 14 and spec.episode_horizon == 5
    assert env.observe().obs.dtype == torch.uint8


class NextDigit(TokenEnv):
    """A task of one's own: prompt "d=", answer (d + 1) mod 10, scored by Python on the decoded text."""

    vocab = CharVocab("0123456789=")
    prompt_length, response_length = 2, 2

    def draw_problems(self, n, generator):
        return torch.randint(0, 10, (n, 1), generator=generator, device=self.device)

    def prompt(self, problem):
        return torch.cat([problem + 2, torch.full_like(problem, self.vocab.id("="))], dim=1)

    def answer(self, problem):
        return torch.cat([(problem + 1) % 10 + 2, torch.full_like(problem, EOS)], dim=1)

    def score(self, problem, response):
        texts = [self.vocab.decode(row) for row in response.cpu()]
        ended = (response == EOS).any(dim=1).cpu()
        right = [t == str((int(d) + 1) % 10) and e for t, d, e in zip(texts, problem[:, 0].tolist(), ended)]
        return torch.tensor(right, dtype=torch.float32, device=self.device)


def test_a_task_of_ones_own_scored_in_python_trains_with_grpo():
    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.lm.config import GRPOConfig
    from rl_gpu.algos.lm.grpo import GRPO

    env = NextDigit(num_envs=16, seed=0)
    step = env.observe()
    answer = env.answer(env.state.inner.problem)
    for t in range(2):
        step = env.step(answer[:, t])
    assert step.reward.eq(1).all()  # the reference answers score 1 through the Python scorer
    algo = GRPO.from_setup(Setup(env=NextDigit(num_envs=16, seed=1), seed=0, hidden_sizes=(32,)),
                           GRPOConfig(group_size=4))
    result = algo.iterate()
    assert float(result["episodes"]) == 16 and 0 <= float(result["episode_return"]) <= 1
