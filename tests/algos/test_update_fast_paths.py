"""The PPO update's CPU fast paths give what the plain code gives: a compiled loss on the CPU gathers a minibatch's
boolean/uint8 frames and casts them eagerly (:meth:`rl_gpu.algos.ppo.update.UpdateUnits.gather_frames`), a
compiled minibatch's forward, gradients and clipping are one graph (``UpdateUnits.minibatch``), and fused Adam steps
without ``optimizer.step()``'s Python (:func:`rl_gpu.algos.optim.fused_adam_steps`)."""

import pytest
import torch

from rl_gpu.algos.ppo import update as update_module
from rl_gpu.algos.ppo.batch import flatten_batch
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.update import UpdateUnits, draw_permutations, run_update
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn import frame_kernels
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.nn.cpu_kernels import use_cpu_kernels

T, N, O, A = 8, 8, 40, 3


def _rollout(obs: torch.Tensor) -> Rollout:
    g = torch.Generator().manual_seed(1)
    zeros, false = torch.zeros(T, N), torch.zeros(T, N, dtype=torch.bool)
    return Rollout(obs=obs, action_mask=torch.ones(T, N, A, dtype=torch.bool),
                   action=torch.randint(0, A, (T, N), generator=g), log_prob=torch.full((T, N), -1.1),
                   value=torch.randn(T, N, generator=g), reward=torch.randn(T, N, generator=g),
                   terminated=torch.rand(T, N, generator=g) < 0.1, truncated=false, final_value=zeros,
                   bootstrap_value=torch.zeros(N), weight=torch.ones(T, N), live=~false,
                   learner_seat=torch.zeros(N, dtype=torch.long), episode_return=zeros,
                   episode_length=torch.zeros(T, N, dtype=torch.long), all_weights_one=True)


def _units(mode: str, epochs: int = 1) -> UpdateUnits:
    torch.manual_seed(0)
    policy = ActorCritic(O, A, (16,))
    config = PPOConfig(update_epochs=epochs, num_minibatches=2)
    return UpdateUnits(policy, torch.optim.Adam(policy.parameters(), lr=1e-3), config, mode)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.float32])
def test_frames_are_gathered_as_floats_only_for_a_compiled_cpu_loss(dtype):
    frames = (torch.rand(T, N, O, generator=torch.Generator().manual_seed(0)) < 0.2).to(dtype)
    flat = flatten_batch(_rollout(frames), torch.zeros(T, N), torch.zeros(T, N), False, False)
    idx = torch.tensor([5, 0, 63, 17])
    assert _units("off").gather_frames(flat, idx) == {}
    gathered = _units("inductor").gather_frames(flat, idx)  # nothing compiles until a unit is called
    if dtype == torch.float32:
        assert gathered == {}  # float observations: the compiled loss gathers them itself
    else:
        assert list(gathered) == ["obs"] and gathered["obs"].dtype == torch.float32
        assert torch.equal(gathered["obs"], frames.flatten(0, 1)[idx].float())
    # A policy whose first layers sum the set cells' weights (rl_gpu.nn.frame_kernels) gets boolean frames as bools.
    units = _units("inductor")
    use_cpu_kernels(units.policy)
    if dtype != torch.float32:
        gathered = units.gather_frames(flat, idx)["obs"]
        assert gathered.dtype == (torch.bool if dtype == torch.bool else torch.float32)
        assert torch.equal(gathered, frames.flatten(0, 1)[idx].to(gathered.dtype))


@pytest.mark.skipif(not frame_kernels.available(), reason="no C compiler to build the frame kernel")
def test_a_compiled_loss_on_boolean_frames_equals_the_eager_one(monkeypatch):
    """With the CPU kernels: the frames enter the compiled loss as bools and its first layers are the frame
    kernel's operator (called in the compiled graph, forward and backward, for the actor and the critic)."""
    g = torch.Generator().manual_seed(3)
    batch = _rollout(torch.rand(T, N, O, generator=g) < 0.2)
    flat = flatten_batch(batch, torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), False, False)
    idx = torch.randperm(T * N, generator=g)[:32]
    monkeypatch.setattr(frame_kernels, "FRAME_FROM", (1, 1))
    calls = []
    library = frame_kernels._library()

    class Counting:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(library, name)

    monkeypatch.setattr(frame_kernels, "_library", Counting)
    results = []
    for mode in ("off", "inductor"):
        units = _units(mode)
        use_cpu_kernels(units.policy)
        gathered = units.gather_frames(flat, idx)
        assert [v.dtype for v in gathered.values()] == ([] if mode == "off" else [torch.bool])
        loss, stats = units.loss(flat, idx, None, gathered)
        loss.backward()
        results.append((loss.detach(), stats, [p.grad for p in units.policy.parameters()]))
    assert calls == ["rl_gpu_frame_linear"] * 2 + ["rl_gpu_frame_linear_grad"] * 2 + (
        ["rl_gpu_frame_linear"] * 2 + ["rl_gpu_frame_linear_grad"] * 2)
    (loss, stats, grads), (c_loss, c_stats, c_grads) = results
    torch.testing.assert_close(c_loss, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c_stats, stats, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, c_grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not frame_kernels.available(), reason="no C compiler to build the frame kernel")
def test_a_compiled_update_of_one_graph_per_minibatch_equals_the_eager_update(monkeypatch):
    """Compiled on the CPU, each minibatch's forward, gradients (the frame kernel's included) and clipping are one
    graph and its step the fused Adam kernel: three epochs give the eager update's parameters, Adam's moments and
    metrics. With ``target_kl`` (a step that may be undone) or micro-batches the compiled update keeps its two
    graphs."""
    batch = _rollout(torch.rand(T, N, O, generator=torch.Generator().manual_seed(4)) < 0.2)
    permutations = draw_permutations(T * N, 3, torch.Generator().manual_seed(2), torch.device("cpu"))
    monkeypatch.setattr(frame_kernels, "FRAME_FROM", (1, 1))
    runs, steps = [], []
    for mode in ("off", "inductor"):
        units = _units(mode, epochs=3)
        use_cpu_kernels(units.policy)
        units.optimizer = torch.optim.Adam(units.policy.parameters(), lr=torch.tensor(1e-3), eps=1e-5, fused=True)
        real = units.minibatch_step
        monkeypatch.setattr(units, "minibatch_step", lambda flat, idx: (steps.append(mode), real(flat, idx))[1])
        runs.append((run_update(units, batch, permutations, weighted=False).as_floats(), units))
    (metrics, units), (c_metrics, c_units) = runs
    assert steps == ["inductor"] * 3 * 2 and units.minibatch is None
    assert c_metrics == pytest.approx(metrics, rel=1e-5, abs=1e-6)
    for p, q in zip(units.policy.parameters(), c_units.policy.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
        for name in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(c_units.optimizer.state[q][name], units.optimizer.state[p][name],
                                       rtol=1e-5, atol=1e-7)
    assert not c_units.fused_minibatches(1, torch.ones((), dtype=torch.bool))  # target_kl's keep flag
    assert not c_units.fused_minibatches(2, None) and c_units.fused_minibatches(1, None)  # micro-batches


def test_only_the_one_graph_minibatch_contracts_multiplies_and_adds(monkeypatch):
    """The minibatch graph's C++ kernels may fuse a multiply and an add (within float rounding of eager code: the
    test above); the other units keep each rounding step."""
    seen = []

    def fake_compile(fn, **kwargs):
        seen.append(kwargs["options"].get("cpp.enable_floating_point_contract_flag"))
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    units = _units("inductor")
    assert units.minibatch is not None
    assert seen.count("fast") == 1 and len(seen) >= 4  # gae, loss, scale, minibatch


def test_the_fused_adam_step_equals_optimizer_step_bit_for_bit(monkeypatch):
    batch = _rollout(torch.rand(T, N, O, generator=torch.Generator().manual_seed(0)) < 0.2)
    permutations = draw_permutations(T * N, 3, torch.Generator().manual_seed(2), torch.device("cpu"))
    runs, steps, real = [], [], update_module.fused_adam_steps
    for fast in (True, False):
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(update_module, "fused_adam_ready", lambda optimizer: False)
            else:
                patch.setattr(update_module, "fused_adam_steps",
                              lambda optimizers: (steps.append(1), real(optimizers)))
            units = _units("off", epochs=3)
            units.optimizer = torch.optim.Adam(units.policy.parameters(), lr=torch.tensor(1e-3), eps=1e-5,
                                               fused=True)
            metrics = run_update(units, batch, permutations, weighted=False).as_floats()
        runs.append((metrics, units.policy, units.optimizer))
    (metrics, policy, optimizer), (slow_metrics, slow_policy, slow_optimizer) = runs
    assert len(steps) == 3 * 2 - 1  # every step but the first (no moments yet: optimizer.step() makes them)
    assert metrics == slow_metrics
    for p, q in zip(policy.parameters(), slow_policy.parameters()):
        assert torch.equal(p, q)
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[p][name], slow_optimizer.state[q][name]), name


@pytest.mark.parametrize("args, says", [(["--rounds", "0"], "--rounds must be at least 1"),
                                        (["--rounds", str(10**12)], "--rounds must be at most 1,000"),
                                        (["--obs-size", "0"], "--obs-size must be between 1 and 4,096"),
                                        (["--frames", "played", "--obs-size", "500"], "--frames played takes")])
def test_the_frame_update_benchmark_refuses_what_it_cannot_time_in_one_line(benchmark_script, capsys, args, says):
    with pytest.raises(SystemExit) as e:
        benchmark_script("frame_update").main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err


@pytest.mark.parametrize("args, says", [(["--rounds", "0"], "--rounds must be at least 1, got 0"),
                                        (["--rounds", str(10**12)], "--rounds must be at most 1,000"),
                                        (["--game", "Brakeout"], "invalid choice: 'Brakeout'")])
@pytest.mark.parametrize("script", ["iteration_forms", "grid_unit_loops", "frame_pair"])
def test_the_minatar_forms_benchmarks_refuse_what_they_cannot_time_in_one_line(benchmark_script, capsys, script, args,
                                                                               says):
    with pytest.raises(SystemExit) as e:
        benchmark_script(script).main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err
