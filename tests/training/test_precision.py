"""Mixed precision (``--precision``): bf16 and fp16 updates track fp32's, fp16's loss scaler skips a step whose
gradients overflow and halves its scale (all on the device), its state resumes exactly, and what cannot run is
refused in one line."""

import copy
import dataclasses
import json

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.loss_scaler import LossScaler
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.precision import resolve_precision
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.cli.train import main
from rl_gpu.envs.registry import make
from rl_gpu.training.runner import resume, train

from test_reliability import QUIET, _config, assert_same_run  # noqa: I001 (a sibling)


def _ppo(precision, **config):
    torch.manual_seed(0)
    env = make("CartPole-v1", num_envs=16, seed=0)
    setup = Setup(env=env, seed=0, num_steps=8, hidden_sizes=(32, 32), precision=precision)
    return make_algorithm("ppo", setup, PPOConfig(num_minibatches=2, update_epochs=2, **config))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_mixed_precision_update_tracks_fp32s(precision):  # fp16: with its scale of 2**16 on every loss
    full, mixed = _ppo("fp32"), _ppo(precision)
    assert mixed.precision == precision and (mixed.units.scaler is not None) == (precision == "fp16")
    rollout = full.collect().clone()
    a, b = full.update(rollout), mixed.update(rollout)
    assert float(b.loss) == pytest.approx(float(a.loss), rel=0.05, abs=1e-3)
    for p, q in zip(full.policy.parameters(), mixed.policy.parameters()):
        assert q.dtype == torch.float32                       # master weights stay fp32
        torch.testing.assert_close(q, p, rtol=0.0, atol=5e-3)  # one Adam step of lr 1e-3 each way


def test_fp16_skips_a_step_whose_gradients_overflow_and_halves_its_scale():
    algo = _ppo("fp16")
    rollout = algo.collect().clone()
    algo.update(rollout)                                      # the optimiser has state to restore from now on
    scaler = algo.units.scaler
    before = [p.detach().clone() for p in algo.policy.parameters()]
    moments = copy.deepcopy(algo.optimizer.state_dict()["state"])
    scaler.scale.fill_(3e38)                                  # every scaled gradient overflows float16
    algo.update(rollout)
    assert float(scaler.scale) == pytest.approx(3e38 / 2 ** 4)   # 2 epochs x 2 minibatches, each halving it
    for p, q in zip(before, algo.policy.parameters()):
        assert torch.equal(p, q)
    after = algo.optimizer.state_dict()["state"]
    for k in moments:
        assert torch.equal(moments[k]["exp_avg"], after[k]["exp_avg"])
    scaler.scale.fill_(1024.0)
    algo.update(rollout)
    assert any(not torch.equal(p, q) for p, q in zip(before, algo.policy.parameters()))
    assert int(scaler.good_steps) == 4


def test_the_scale_grows_after_a_run_of_finite_steps():
    scaler = LossScaler(torch.device("cpu"), init_scale=8.0, growth_interval=3)
    for _ in range(3):
        scaler.update(torch.tensor(True))
    assert float(scaler.scale) == 16.0 and int(scaler.good_steps) == 0
    scaler.update(torch.tensor(False))
    assert float(scaler.scale) == 8.0


def test_auto_is_bf16_only_for_convolutions_where_the_device_computes_in_bf16(monkeypatch, tmp_path):
    from rl_gpu.algos import precision

    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    # On a CUDA device with bf16, auto takes it only for a policy with convolutions (where it was measured to pay).
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.Flatten())
    assert resolve_precision("auto", torch.device("cuda"), mlp) == "fp32"
    assert resolve_precision("auto", torch.device("cuda"), cnn) == "bf16"
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert resolve_precision("auto", torch.device("cpu"), cnn) == "fp32"
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert resolve_precision("auto", torch.device("cpu"), cnn) == "bf16"
    assert resolve_precision("auto", torch.device("cpu"), mlp) == "fp32"
    monkeypatch.undo()
    for flags, native in (("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", True), ("amx_bf16 amx_tile", True)):
        (tmp_path / "cpuinfo").write_text(f"processor : 0\nflags : {flags}\n")
        assert precision.cpu_has_bf16(str(tmp_path / "cpuinfo")) is native
    assert precision.cpu_has_bf16(str(tmp_path / "missing")) is False
    with pytest.raises(ValueError, match="--precision must be one of"):
        resolve_precision("fp8", torch.device("cpu"))


def test_an_fp16_run_resumes_exactly(tmp_path):
    (full,) = train(_config("CartPole-v1", tmp_path / "a", precision="fp16", max_updates=5, min_updates=5),
                    log=QUIET)
    stopped = _config("CartPole-v1", tmp_path / "b", precision="fp16", max_updates=5, min_updates=5)
    (paused,) = train(stopped, log=QUIET, stop_after=2)
    assert paused.status == "paused"
    resume(tmp_path / "b" / "seed-5", stopped, log=QUIET)
    assert_same_run(tmp_path / "a" / "seed-5", tmp_path / "b" / "seed-5")
    saved = json.loads((tmp_path / "a" / "seed-5" / "config.json").read_text())
    assert saved["precision"] == "fp16"


@pytest.mark.parametrize("args, needle", [
    (["--env", "Pendulum-v1", "--algo", "sac", "--precision", "bf16"], "--precision bf16 does not apply to --algo sac"),
    (["--env", "CartPoleNoVel-v1", "--memory", "gru", "--precision", "fp16"], "--memory with --precision fp16"),
    (["--env", "CartPole-v1", "--precision", "bf16", "--parallel", "--seeds", "1", "2"], "--parallel with --precision"),
    (["--env", "CartPole-v1", "--precision", "fp8"], "fp8"),
])
def test_what_cannot_run_is_one_line_exit_2(tmp_path, call_main, args, needle):
    out = tmp_path / "never"
    code, _, err = call_main(main, *args, "--output", out, "--device", "cpu", "--max-updates", "1",
                             "--min-updates", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_the_precision_flag_trains_from_the_command_line(tmp_path, call_main):
    out = tmp_path / "run"
    code, _, err = call_main(main, "--env", "CartPole-v1", "--precision", "bf16", "--output", out, "--device", "cpu",
                             "--num-envs", "16", "--num-steps", "8", "--max-updates", "2", "--min-updates", "2",
                             "--eval-every", "2", "--eval-episodes", "4", "--final-eval-episodes", "4", "--seeds", "1")
    assert code in (0, 1), err
    assert json.loads((out / "seed-1" / "config.json").read_text())["precision"] == "bf16"
    assert dataclasses.is_dataclass(_config("CartPole-v1", tmp_path / "x"))
