"""The hot loop never synchronises with the host: collecting and updating make no .item(), .cpu(), .tolist(),
bool(tensor), nonzero() or data-dependent shapes. On CPU the calls are made to raise; on CUDA
(``-m gpu`` machines) a few iterations run under ``torch.cuda.set_sync_debug_mode("error")``."""

import contextlib
import json
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rl_gpu.envs.registry import make
from rl_gpu.algos.ppo import PPO, PPOConfig, update_policy
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.collect.reference import collect

HOST_READS = ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__")


class HostSync(AssertionError):
    pass


def _allowed(name: str, tensor: torch.Tensor) -> bool:
    # torch.optim's non-capturable Adam reads its step counter with .item(); it keeps that counter in host memory
    # (also on CUDA), so the read is not a device synchronisation. Allowed for that one caller only.
    # The caller is 2 frames up; 4 when the read came back through _NoMaskIndexing's __torch_function__ (which
    # dispatches the patched method a second time).
    # A CPU rollout also reads which of its steps had a truncated row (RolloutEngine._value_final_obs): a CPU
    # tensor has no device to wait for, and the engine takes that path on the CPU only.
    if name == "item":
        caller, place = "_get_value", "torch/optim"
    elif name in ("nonzero", "tolist") and tensor.device.type == "cpu":
        caller, place = "_value_final_obs", "rl_gpu/collect/engine.py"
    else:
        return False
    frame, depth = sys._getframe(2), 0
    while frame is not None and depth < 3:
        if frame.f_code.co_name == caller and place in frame.f_code.co_filename:
            return True
        frame, depth = frame.f_back, depth + 1
    return False


class _NoMaskIndexing(TorchFunctionMode):
    """Indexing with a bool tensor has a data-dependent shape (it runs nonzero() in C++): refused while active.
    A mode rather than a patched ``torch.Tensor.__getitem__``: assigning ``__getitem__`` on the class makes every
    tensor a Python sequence for good (``torch.tensor([0-d tensors])`` then fails for the rest of the process)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ or func is torch.Tensor.__setitem__:
            index = args[1]
            parts = index if isinstance(index, tuple) else (index,)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 0 for i in parts):
                raise HostSync(f"data-dependent shape: boolean-mask Tensor.{func.__name__}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def forbid_host_sync():
    """Make every host read of a tensor (and torch.nonzero) raise :class:`HostSync` inside the block."""
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    own = {name: torch.Tensor.__dict__[name] for name in HOST_READS if name in torch.Tensor.__dict__}
    original_nonzero = torch.nonzero

    def guard(name):
        def method(self, *args, **kwargs):
            if _allowed(name, self):
                return originals[name](self, *args, **kwargs)
            raise HostSync(f"host synchronisation: Tensor.{name}() in the hot loop")
        return method

    def nonzero(*args, **kwargs):
        raise HostSync("host synchronisation: torch.nonzero() in the hot loop")

    for name in HOST_READS:
        setattr(torch.Tensor, name, guard(name))
    torch.nonzero = nonzero
    try:
        with _NoMaskIndexing():
            yield
    finally:
        for name in HOST_READS:  # back to torch.Tensor's own method, or to the one it inherits
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)
        torch.nonzero = original_nonzero


def test_the_guard_catches_host_reads():
    x = torch.ones(3)
    for read in (lambda: x.sum().item(), lambda: bool(x.any()), lambda: x.tolist(), lambda: x.nonzero(),
                 lambda: torch.nonzero(x), lambda: float(x[0]), lambda: int(x[0]), lambda: x.cpu(),
                 lambda: x[x > 0], lambda: x.__setitem__(x > 0, 0.0)):
        with forbid_host_sync(), pytest.raises(HostSync):
            read()
    assert x.sum().item() == 3.0


def _setup(env_id, n=16, **ppo):
    env = make(env_id, num_envs=n, seed=1, validate_actions=False)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec, normalize_obs=True)
    config = PPOConfig(num_minibatches=2, update_epochs=3, **ppo)
    return env, policy, config


@pytest.mark.parametrize("env_id, episodic", [("CartPole-v1", False), ("RussianRoulette-v0", True),
                                              ("Pendulum-v1", False)])
def test_collect_and_engine_do_not_synchronise(env_id, episodic):
    env, policy, _ = _setup(env_id)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    engine = RolloutEngine(policy, env, 12, episodic=episodic)
    with forbid_host_sync():
        collect(policy, env, 12, g1, episodic=episodic, opponent_rng=g2)
        rollout = engine.collect(g1, g2)
        rollout.episode_stats()
        rollout.transitions()


@pytest.mark.parametrize("target_kl", [None, 1e-6])
def test_update_does_not_synchronise_with_or_without_target_kl(target_kl):
    env, policy, config = _setup("CartPole-v1", target_kl=target_kl)
    batch = collect(policy, env, 8, torch.Generator().manual_seed(1))
    plain = torch.optim.Adam(policy.parameters(), lr=1e-3)
    algo = PPO(policy, config, 1e-3, seed=3)
    with forbid_host_sync():
        update_policy(policy, plain, batch, config, torch.Generator().manual_seed(0))
        update_policy(policy, plain, batch, config, torch.Generator().manual_seed(0))
        algo.update(batch)
        algo.update(batch)
        algo.set_learning_rate(5e-4)


@pytest.mark.parametrize("env_id, episodic", [("CartPole-v1", False), ("RussianRoulette-v0", True)])
def test_whole_iteration_does_not_synchronise(env_id, episodic):
    env, policy, config = _setup(env_id, target_kl=0.01)
    algo = PPO(policy, config, 1e-3, seed=3)
    g = torch.Generator().manual_seed(2)
    algo.iterate(env, 8, episodic=episodic, opponent_rng=g)
    with forbid_host_sync():
        for _ in range(2):
            _ = algo.iterate(env, 8, episodic=episodic, opponent_rng=g)
            rollout = algo.last_rollout
            rollout.episode_stats()


@pytest.mark.parametrize("loop", ["async-appo", "double-buffer"])
def test_threaded_loops_do_not_synchronise(loop):
    # The guard patches torch.Tensor itself, so the collecting thread is watched too.
    from rl_gpu.algos.vtrace.algorithm import APPO
    from rl_gpu.algos.vtrace.config import APPOConfig

    env = make("CartPole-v1", num_envs=8, seed=0)
    policy = policy_for_env(env.spec, normalize_obs=True)
    if loop == "async-appo":
        algo = APPO(policy, APPOConfig(num_minibatches=2, update_epochs=2, decoupled_clip=True, max_policy_lag=6),
                    1e-3, seed=3, env=env, num_steps=8, async_collect=True)
    else:
        algo = PPO(policy, PPOConfig(num_minibatches=2, update_epochs=2, max_policy_lag=2), 1e-3, seed=3, env=env,
                   num_steps=8, double_buffer=True)
    algo.iterate()
    with forbid_host_sync():
        for _ in range(2):
            algo.iterate()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["off", "inductor", "cudagraphs"])
@pytest.mark.parametrize("env_id, episodic", [("CartPole-v1", False), ("RussianRoulette-v0", True)])
def test_cuda_iterations_under_sync_debug_mode_error(mode, env_id, episodic):
    env = make(env_id, num_envs=256, seed=1, device="cuda", validate_actions=False)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec, normalize_obs=True).cuda()
    algo = PPO(policy, PPOConfig(num_minibatches=4, update_epochs=2, target_kl=0.01), 1e-3, seed=3, compile=mode)
    g = torch.Generator(device="cuda").manual_seed(2)
    # The first calls compile and (cudagraphs) warm up and capture; those may synchronise.
    for _ in range(2):
        algo.iterate(env, 8, episodic=episodic, opponent_rng=g)
        algo.update(algo.collect(env, 8, episodic=episodic, opponent_rng=g))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            algo.set_learning_rate(5e-4)
            algo.iterate(env, 8, episodic=episodic, opponent_rng=g)
            rollout = algo.collect(env, 8, episodic=episodic, opponent_rng=g)
            algo.update(rollout)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def _run_trainer_counting_reads(tmp_path, monkeypatch, guard, device="cpu"):
    """A 12-update CartPole run whose updates (but the first two, which may compile or capture) run inside
    ``guard()``; returns the updates read back together at each host read."""
    import dataclasses

    from rl_gpu.cli.presets import preset_config
    from rl_gpu.training.runner import Trainer, train

    reads = []
    train_one_update, read_metrics = Trainer.train_one_update, Trainer.read_metrics

    def guarded(self, logger):
        with guard() if self.state.update >= 2 else contextlib.nullcontext():
            return train_one_update(self, logger)

    def counting(self, pending):
        reads.append([p.update for p in pending])
        return read_metrics(self, pending)

    monkeypatch.setattr(Trainer, "train_one_update", guarded)
    monkeypatch.setattr(Trainer, "read_metrics", counting)
    config = dataclasses.replace(
        preset_config("CartPole-v1"), device=device, seeds=(3,), num_envs=32, num_steps=16, max_updates=12,
        log_every=5, eval_every=10, checkpoint_every=10, eval_episodes=16, final_eval_episodes=16,
        solve_threshold=1e9, output=tmp_path, overwrite=True, quiet=True)
    (result,) = train(config, log=lambda line: None)
    assert result.status == "goal_not_met"
    lines = [json.loads(x) for x in (tmp_path / "seed-3" / "metrics.jsonl").read_text().splitlines()]
    assert [x["update"] for x in lines if "loss" in x] == list(range(1, 13))
    assert [x["update"] for x in lines if "validation" in x] == [0, 10, 12]
    return reads


def test_trainer_reads_metrics_once_per_log_interval(tmp_path, monkeypatch):
    reads = _run_trainer_counting_reads(tmp_path, monkeypatch, forbid_host_sync)
    # Read at the first update, every log_every=5 and at the last; validations (10) and checkpoints (10) fall
    # on those reads.
    assert reads == [[1], [2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_trainer_updates_between_reads_do_not_synchronise(tmp_path, monkeypatch):
    @contextlib.contextmanager
    def sync_error():
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")

    reads = _run_trainer_counting_reads(tmp_path, monkeypatch, sync_error, device="cuda")
    assert reads == [[1], [2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12]]
