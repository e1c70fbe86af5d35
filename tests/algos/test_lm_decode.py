"""Generation's decoding step in every ``--compile`` mode: the static-shape step (a 0-dim position, a masked full
cache) gives the eager step's logits at every position, the Inductor-compiled decoder gives the eager decoder's
responses, and what cannot compile is refused in one line."""

from __future__ import annotations

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.lm.common import generate
from rl_gpu.algos.lm.config import GRPOConfig
from rl_gpu.algos.lm.decode import Decoder
from rl_gpu.algos.lm.grpo import GRPO
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import make
from rl_gpu.nn.transformer import TransformerPolicy, write_step


def test_the_static_step_is_the_sliced_step_at_every_position():
    torch.manual_seed(0)
    policy = TransformerPolicy(14, 6, 5, 32, 2, 2).eval()
    prompt = torch.randint(2, 14, (4, 6))
    tokens = torch.randint(2, 14, (4, 5))
    with torch.no_grad():
        first, sliced = policy.start(prompt)
        static = sliced.clone()
        static[:, :, :, :, 6:] = 7.0  # stale values past the position must stay unseen
        for t in range(4):
            eager = policy.next_logits(tokens[:, t], sliced, 6 + t)
            masked, written = policy.next_logits_at(tokens[:, t], static, torch.tensor(6 + t))
            torch.testing.assert_close(masked, eager, atol=1e-5, rtol=1e-5)
            write_step(static, written, torch.tensor(6 + t))
            torch.testing.assert_close(static[..., :7 + t, :], sliced[..., :7 + t, :])


def _decoded_alike(mode: str, device: str = "cpu", calls: int = 1) -> None:
    """Responses generated with ``mode``'s decoder (``calls`` times: a CUDA graph is replayed from the second)
    equal the eager decoder's, from the same generator states."""
    torch.manual_seed(0)
    shape = make("Addition-v0?digits=1", num_envs=8, seed=3)
    policy = TransformerPolicy(shape.vocab.size, shape.prompt_length, shape.response_length, 32, 2, 2)
    policy = policy.to(device).eval()
    answers = {}
    for name in ("off", mode):
        env = make("Addition-v0?digits=1", num_envs=8, seed=3, device=device)
        decoder, generator = Decoder(policy, name), torch.Generator(device=device).manual_seed(1)
        answers[name] = []
        for _ in range(calls):
            env.group(2)
            with torch.no_grad():
                answers[name].append(generate(policy, env, generator, group=2, decoder=decoder))
    for ours, eager in zip(answers[mode], answers["off"], strict=True):
        assert torch.equal(ours.tokens, eager.tokens)
        torch.testing.assert_close(ours.log_prob, eager.log_prob, atol=1e-5, rtol=1e-5)


def test_an_inductor_decoder_generates_what_the_eager_one_does():
    _decoded_alike("inductor")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_graph_decoder_generates_what_the_eager_one_does():
    _decoded_alike("cudagraphs", "cuda", calls=3)


def test_what_a_decoder_refuses():
    policy = TransformerPolicy(14, 4, 3, 32, 1, 2)
    with pytest.raises(UsageError, match="--compile must be one of off, inductor, cudagraphs here"):
        Decoder(policy, "auto")

    class Other:
        def config(self):
            return {"kind": "hf_causal_lm"}

    with pytest.raises(UsageError, match="'hf_causal_lm' policy generates eagerly: use --compile off"):
        Decoder(Other(), "inductor")
    with pytest.raises(RuntimeError, match="before start"):
        Decoder(policy, "off").next_logits(torch.zeros(2, dtype=torch.long), 4)


def test_grpo_takes_its_decoding_mode_from_the_setup():
    env = make("Addition-v0?digits=1", num_envs=8, seed=0)
    algo = GRPO(Setup(env=env, seed=0, learning_rate=1e-4, compile="inductor"), GRPOConfig(group_size=4))
    assert algo.decoder.mode == "inductor"
