"""A custom environment is checked before a run writes anything (issue 37, item 2): each way of breaking the
contract is refused in one line naming the class, the output, what was expected and what it got (exit 2, no run
folder); an exception in the environment's own code keeps its traceback but leaves no run folder either; an
environment without a preset trains with small generic defaults, printed at the start."""

import itertools
import json
import textwrap

import pytest

from rl_gpu.cli.train import main
from rl_gpu.envs.params import EnvContractError
from rl_gpu.envs.testing.preflight import check_run_env

ENVS = '''
from typing import NamedTuple

import torch

from rl_gpu.envs.base import TensorEnv


class S(NamedTuple):
    x: torch.Tensor
    t: torch.Tensor


class Good(TensorEnv[S]):
    obs_shape = (2,)
    num_actions = 2
    max_episode_steps = 20

    def _sample_initial_state(self, n, g):
        return S(torch.rand(n, generator=g, device=self.device) - 0.5, torch.zeros(n, device=self.device))

    def _transition(self, s, a):
        x = s.x + (a.float() - 0.5) * 0.2
        return S(x, s.t + 1), -x.abs(), x.abs() > 1

    def _observe(self, s):
        return torch.stack([s.x, s.t / 20], 1)


class ObsFlat(Good):
    def _observe(self, s):
        return s.x


class ObsDouble(Good):
    def _observe(self, s):
        return super()._observe(s).double()


class ObsInt(Good):
    def _observe(self, s):
        return super()._observe(s).long()


class TerminatedFloat(Good):
    def _transition(self, s, a):
        inner, reward, terminated = super()._transition(s, a)
        return inner, reward, terminated.float()


class RewardColumn(Good):
    def _transition(self, s, a):
        inner, reward, terminated = super()._transition(s, a)
        return inner, reward[:, None], terminated


class TerminatedOne(Good):
    def _transition(self, s, a):
        inner, reward, terminated = super()._transition(s, a)
        return inner, reward, terminated[:1]


class DictState(Good):
    def _sample_initial_state(self, n, g):
        return {"x": torch.zeros(n, device=self.device)}


class AllMasked(Good):
    def _legal_actions(self, s):
        return torch.zeros(s.x.shape[0], 2, dtype=torch.bool, device=self.device)


class NanLater(Good):
    def _observe(self, s):
        obs = super()._observe(s)
        return torch.where(s.t[:, None] >= 3, float("nan"), obs)


class NanReward(Good):
    def _transition(self, s, a):
        inner, reward, terminated = super()._transition(s, a)
        return inner, reward * float("nan"), terminated


class Crashes(Good):
    def _transition(self, s, a):
        raise ZeroDivisionError("the user's own bug")
'''

_names = itertools.count()

BROKEN = [
    ("ObsFlat", "ObsFlat: _observe(state) must be a torch.float32 tensor of shape (4, 2), got a torch.float32 "
                "tensor of shape (4,)"),
    ("ObsDouble", "ObsDouble: _observe(state) must be a torch.float32 tensor of shape (4, 2), got a torch.float64"),
    ("ObsInt", "ObsInt: _observe(state) must be a torch.float32 tensor of shape (4, 2), got a torch.int64"),
    ("TerminatedFloat", "TerminatedFloat: _transition's terminated must be a torch.bool tensor of shape (4,), got a "
                        "torch.float32"),
    ("RewardColumn", "RewardColumn: _transition's reward must be a torch.float32 tensor of shape (4,), got a "
                     "torch.float32 tensor of shape (4, 1)"),
    ("TerminatedOne", "TerminatedOne: _transition's terminated must be a torch.bool tensor of shape (4,), got a "
                      "torch.bool tensor of shape (1,)"),
    ("DictState", "DictState._sample_initial_state must return a NamedTuple of tensors (one row per environment), "
                  "got a dict"),
    ("AllMasked", "AllMasked: every action is masked in env row 0 at step 0"),
    ("NanLater", "NanLater: obs is not finite in env row 0 at step 3 (got [nan, nan])"),
    ("NanReward", "NanReward: reward is not finite in env row 0 at step 1 (got nan)"),
]


@pytest.fixture
def envs_module(tmp_path, monkeypatch):
    """A fresh module of environments in the current directory (a new name each time: no import cache)."""
    name = f"preflight_envs_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(ENVS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize("cls,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_environment_is_refused_in_one_line_before_anything_is_written(call_main, envs_module, tmp_path,
                                                                               cls, message):
    out = tmp_path / "run"
    code, stdout, stderr = call_main(main, "--env", f"{envs_module}:{cls}", "--output", out, "--max-updates", 2)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"rl-gpu train: error: --env {envs_module}:{cls}")
    assert not out.exists()


def test_an_exception_in_the_environment_keeps_its_traceback_and_writes_nothing(call_main, envs_module, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ZeroDivisionError, match="the user's own bug"):
        call_main(main, "--env", f"{envs_module}:Crashes", "--output", out)
    assert not out.exists()


def test_an_environment_without_a_preset_gets_small_defaults_printed_at_the_start(call_main, envs_module, tmp_path):
    out = tmp_path / "run"
    code, stdout, stderr = call_main(main, "--env", f"{envs_module}:Good", "--output", out, "--max-updates", 1,
                                     "--num-steps", 16)
    assert code in (0, 1), stderr
    first = stdout.splitlines()[0]
    assert first.startswith(f"{envs_module}:Good has no preset: generic defaults for a small task (--num-envs 256")
    assert "--final-eval-episodes 256" in first and "flags override them" in first
    saved = json.loads((out / "seed-11" / "config.json").read_text())
    assert saved["num_envs"] == 256 and saved["num_steps"] == 16 and saved["final_eval_episodes"] == 256
    assert saved["total_timesteps"] == 1_000_000 and saved["max_updates"] == 1
    summary = json.loads((out / "seed-11" / "summary.json").read_text())
    assert summary["status"] == "budget_spent" and summary["updates"] == 1  # --max-updates came first


def test_built_in_environments_pass_the_check():
    from rl_gpu.envs.registry import make

    for env_id in ("RussianRoulette-v0", "LeducHoldem-v0", "CartPole-v1", "Pendulum-v1", "MountainCar-v0",
                   "gym:CartPole-v1", "gym:Pendulum-v1"):  # the Gymnasium bridge restarts on load: not exact
        check_run_env(make(env_id, num_envs=4, seed=0))


def test_the_check_is_public_and_raises_one_error_type(envs_module):
    import importlib

    module = importlib.import_module(envs_module)
    with pytest.raises(EnvContractError, match="must be a torch.bool tensor"):
        check_run_env(module.TerminatedFloat(4, seed=0))
    check_run_env(module.Good(4, seed=0))


NAN_LATE = '''
from typing import NamedTuple

import torch

from rl_gpu.envs.base import TensorEnv


class S(NamedTuple):
    t: torch.Tensor


class NanAfter20(TensorEnv[S]):
    """Passes the check before the run (16 steps), then returns NaN observations from step 20 on, for good."""

    obs_shape = (2,)
    num_actions = 2
    max_episode_steps = 200

    def _sample_initial_state(self, n, g):
        return S(torch.zeros(n, device=self.device))

    def _transition(self, s, a):
        return S(s.t + 1), torch.ones_like(s.t), torch.zeros_like(s.t, dtype=torch.bool)

    def _observe(self, s):
        x = torch.stack([s.t / 100, torch.ones_like(s.t)], 1)
        return torch.where(s.t[:, None] >= 20, float("nan"), x)
'''


def test_a_non_finite_output_during_training_is_named_as_the_environment_s(call_main, tmp_path, monkeypatch):
    name = f"nan_late_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(NAN_LATE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = call_main(main, "--env", f"{name}:NanAfter20", "--output", tmp_path / "run", "--num-envs", 8,
                             "--num-steps", 16, "--max-updates", 4, "--solve-threshold", 1e9, "--eval-episodes", 8)
    assert code == 3, err
    assert f"after {name}:NanAfter20 returned a non-finite obs in env row 0" in err, err


def test_check_env_names_a_wrong_output_type_instead_of_a_torch_error(envs_module):
    import importlib

    from rl_gpu.envs.testing import EnvCheckError, check_env

    module = importlib.import_module(envs_module)
    with pytest.raises(EnvCheckError, match="TerminatedFloat: _transition's terminated must be a torch.bool"):
        check_env(module.TerminatedFloat, num_envs=4, num_steps=8)
    check_env(module.Good, num_envs=4, num_steps=30)


def test_an_environment_of_the_protocol_alone_is_checked_too():
    """A VecEnv that is not a TensorEnv (its own class, only the protocol's members): checked through its spec."""
    from rl_gpu.core.types import EnvSpec, StepResult
    from rl_gpu.envs.registry import make

    class Wrapped:  # the protocol's members only, around a CartPole batch
        def __init__(self, bad_reward=False):
            self.inner, self.bad_reward = make("CartPole-v1", num_envs=4, seed=0), bad_reward
            self.num_envs, self.device = 4, self.inner.device

        @property
        def spec(self) -> EnvSpec:
            return self.inner.spec

        def _out(self, step: StepResult) -> StepResult:
            return step._replace(reward=step.reward.double()) if self.bad_reward else step

        def reset(self, seed=None):
            return self._out(self.inner.reset(seed))

        def step(self, action):
            return self._out(self.inner.step(action))

        def observe(self):
            return self.inner.observe()

        def state_dict(self):
            return self.inner.state_dict()

        def load_state_dict(self, state):
            self.inner.load_state_dict(state)

    check_run_env(Wrapped())
    with pytest.raises(EnvContractError, match="Wrapped: .*reward has the wrong shape or dtype"):
        check_run_env(Wrapped(bad_reward=True))


RAISES_LATE = '''
from typing import NamedTuple

import torch

from rl_gpu.envs.base import TensorEnv


class S(NamedTuple):
    t: torch.Tensor


class RaisesAt30(TensorEnv[S]):
    """Passes the check before the run (16 steps), then raises in its own code at step 30."""

    obs_shape = (1,)
    num_actions = 2
    max_episode_steps = 100

    def _sample_initial_state(self, n, g):
        return S(torch.zeros(n, device=self.device))

    def _transition(self, s, a):
        if bool((s.t >= 30).any()):
            raise RuntimeError("the user's own bug, late")
        return S(s.t + 1), torch.ones_like(s.t), torch.zeros_like(s.t, dtype=torch.bool)

    def _observe(self, s):
        return s.t[:, None] / 100
'''


def test_a_late_exception_in_the_environment_leaves_no_half_made_run_folder(call_main, tmp_path, monkeypatch):
    name = f"raises_late_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(RAISES_LATE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["--env", f"{name}:RaisesAt30", "--output", tmp_path / "run", "--num-envs", 4, "--num-steps", 50,
            "--eval-episodes", 4]
    with pytest.raises(RuntimeError, match="the user's own bug, late"):
        call_main(main, *args)
    run = tmp_path / "run" / "seed-11"
    assert not run.exists() or sorted(p.name for p in run.iterdir()) == [".rl_gpu.lock"]  # nothing half-made
    with pytest.raises(RuntimeError, match="the user's own bug, late"):
        call_main(main, *args)  # the rerun needs no --overwrite: it fails the same way, not on the folder
