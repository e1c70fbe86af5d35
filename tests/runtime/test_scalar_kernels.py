"""Units that step an integer or boolean grid game (``TensorEnv.compile_simd`` False) compile their CPU kernels as
plain loops but for the float ones (rl_gpu.runtime.inductor_loops), and give the eager step's results exactly."""

from __future__ import annotations

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.runtime import compile as compile_module
from rl_gpu.runtime import inductor_loops
from rl_gpu.runtime.compile import compile_unit, env_simd
from rl_gpu.runtime.inductor_loops import SCALAR_CPU_KERNELS, PlainNonFloatLoops


def test_grid_games_declare_scalar_kernels_and_float_tasks_keep_simd():
    assert not env_simd(make("MinAtar-Breakout-v1", num_envs=2))
    assert not env_simd(make("MinAtar-SpaceInvaders-v1?sticky_action_prob=0", num_envs=2))  # a built subclass
    assert not env_simd(make("RussianRoulette-v0", num_envs=2))
    assert env_simd(make("CartPole-v1", num_envs=2))
    assert env_simd(object())  # anything without the attribute: Inductor's default


def test_the_rollout_step_of_a_grid_game_compiles_with_scalar_options(monkeypatch):
    seen = []

    def fake_compile(fn, **kwargs):
        seen.append(kwargs["options"])
        return fn

    monkeypatch.setattr(compile_module.torch, "compile", fake_compile)
    policy = UniformRandomPolicy()
    for env_id in ("MinAtar-Breakout-v1", "CartPole-v1"):  # each builds its step unit when a rollout needs it
        engine = RolloutEngine(policy, make(env_id, num_envs=2), 4, episodic=True, compile="inductor")
        engine._unit(engine.steps_per_call(), False)
    assert len(seen) == 2 and isinstance(seen[0]["post_grad_custom_post_pass"], PlainNonFloatLoops)
    assert not isinstance(seen[1]["post_grad_custom_post_pass"], PlainNonFloatLoops)
    assert not any(k in options for options in seen for k in SCALAR_CPU_KERNELS)


def _vector_types(fn, *args, simd: bool) -> set[str]:
    _, (code,) = run_and_get_code(compile_unit(fn, "inductor", simd=simd), *args)
    return set(re.findall(r"VectorizedN?<[a-z0-9_]+", code))


def _int_and_float_loops(counts, x):
    return (counts * 3 + 1) % 7, torch.tanh(x) * 2.0


def test_a_grid_unit_keeps_simd_for_its_float_loops_only():
    args = (torch.arange(640).reshape(64, 10), torch.randn(64, 64))
    assert _vector_types(_int_and_float_loops, *args, simd=True) == {"Vectorized<float", "VectorizedN<int64_t"}
    assert _vector_types(_int_and_float_loops, *args, simd=False) == {"Vectorized<float"}  # the integer loop plain


def test_without_the_patch_a_grid_unit_is_plain_loops_throughout(monkeypatch):
    monkeypatch.setattr(inductor_loops, "install", lambda: False)
    options = inductor_loops.grid_unit_options()
    assert options["cpp.simdlen"] == 1 and not isinstance(options["post_grad_custom_post_pass"], PlainNonFloatLoops)


def _compiled_equals_eager(env_id: str, episodes_end: bool = True) -> None:
    env = make(env_id, num_envs=16, seed=1, validate_actions=False)
    step = compile_unit(env.step_state, "inductor", simd=env_simd(env))
    eager_state = compiled_state = env.state
    g = torch.Generator().manual_seed(2)
    ends = 0
    for _ in range(60):
        legal = env.timestep(eager_state).action_mask.float()
        action = torch.multinomial(legal, 1, generator=g)[:, 0]
        reset = env.draw_starts(16)
        eager_state, a = env.step_state(eager_state, action, reset)
        compiled_state, b = step(compiled_state, action, reset)
        for x, y in zip((*eager_state.inner, *eager_state[1:]), (*compiled_state.inner, *compiled_state[1:])):
            assert torch.equal(x, y)
        for name in ("obs", "final_obs", "reward", "terminated", "truncated", "episode_return", "episode_length"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        ends += int((a.terminated | a.truncated).sum())
    assert (ends > 0) == episodes_end  # the comparison crossed episode ends (auto-resets)


def test_a_scalar_compiled_minatar_step_equals_the_eager_one():
    _compiled_equals_eager("MinAtar-Breakout-v1")


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["MinAtar-Asterix-v1", "MinAtar-Freeway-v1", "MinAtar-Seaquest-v1",
                                    "MinAtar-SpaceInvaders-v1", "RussianRoulette-v0", "LeducHoldem-v0"])
def test_other_scalar_compiled_steps_equal_the_eager_ones(env_id):
    _compiled_equals_eager(env_id, episodes_end=env_id != "MinAtar-Freeway-v1")  # Freeway: 2,500 frames


@pytest.mark.parametrize("args, says", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--num-envs", "0"], "--num-envs must be between 1 and 65,536"),
    (["--ids", "CartPole-v9"], "unknown environment id"),
    (["--ids", "Ant-v5"], "only tensor environments compile"),
])
def test_the_kernel_benchmark_refuses_what_it_cannot_time_in_one_line(benchmark_script, capsys, args, says):
    with pytest.raises(SystemExit) as e:
        benchmark_script("cpu_env_kernels").main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err
