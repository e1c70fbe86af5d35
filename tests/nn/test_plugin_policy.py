"""The policy door: a policy kind written here, against the public interface only (``PolicyKind``,
``DeployedActor``, the distributions), registered from the tests, trains with ``rl-gpu train --policy``,
evaluates, loads with ``rl_gpu.load`` and exports to TorchScript and ONNX, with no change to rl_gpu; where it is
not registered, its checkpoints are refused in one line."""

import io
import json

import pytest
import torch
from torch import nn

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.deploy import DeployedActor
from rl_gpu.nn.kinds import PolicyKind, policy_kind_names, register_policy_kind, unregister_policy_kind


class ToyLinear(nn.Module):
    """A linear masked-categorical actor and a linear critic: no hidden layer."""

    is_continuous = False

    def __init__(self, obs_dim: int, num_actions: int) -> None:
        super().__init__()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.actor = nn.Linear(obs_dim, num_actions)
        self.critic = nn.Linear(obs_dim, 1)

    def act(self, obs, action_mask=None, generator=None, deterministic=False, noise=None, critic_obs=None):
        action, log_prob = D.categorical_act(self.actor(obs), action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, self.value(obs))

    def evaluate(self, obs, action, action_mask=None, critic_obs=None):
        log_prob, entropy = D.categorical_log_prob_entropy(self.actor(obs), action_mask, action)
        return log_prob, entropy, self.value(obs)

    def value(self, obs, critic_obs=None):
        return self.critic(obs).squeeze(-1)

    def update_normalizer(self, obs, weight=None, critic_obs=None) -> None:
        pass

    def config(self) -> dict:
        return {"kind": "toy_linear", "obs_dim": self.obs_dim, "num_actions": self.num_actions}

    def export_module(self) -> DeployedActor:
        return DeployedActor(self.actor, self.obs_dim, num_actions=self.num_actions)


def toy_for_env(spec, hidden_sizes, normalize_obs, init_log_std):
    return ToyLinear(spec.obs_size, spec.num_actions)


KIND = PolicyKind("toy_linear", f"{__name__}:ToyLinear", {"obs_dim": int, "num_actions": int},
                  ("obs_dim", "num_actions"), "discrete", f"{__name__}:toy_for_env", "a linear policy from the tests")


@pytest.fixture
def toy_kind():
    register_policy_kind(KIND)
    yield KIND
    unregister_policy_kind("toy_linear")


TINY = ["--num-envs", "8", "--num-steps", "16", "--max-updates", "2", "--eval-every", "1",
        "--eval-episodes", "8", "--final-eval-episodes", "8", "--solve-threshold", "1e9", "--min-updates", "1",
        "--device", "cpu", "--quiet"]


def test_a_registered_policy_kind_trains_evaluates_loads_and_exports(toy_kind, tmp_path, call_main):
    call = call_main
    import rl_gpu
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.train import main as train
    from rl_gpu.interop.export import DeterministicPolicy, to_torchscript_bytes
    from rl_gpu.runtime.checkpoint import CheckpointError, load_checkpoint

    code, _, err = call(train, "--env", "CartPole-v1", *TINY, "--policy", "toy_linear", "--output", tmp_path / "run")
    assert code == 1, err  # the goal is out of reach: every file written, exit 1
    run = tmp_path / "run" / "seed-11"
    assert json.loads((run / "config.json").read_text())["policy"] == "toy_linear"
    assert load_checkpoint(run / "best.pt")["policy_config"] == {"kind": "toy_linear", "obs_dim": 4,
                                                                  "num_actions": 2}
    code, out, err = call(evaluate, run / "best.pt", "--episodes", "4", "--device", "cpu")
    assert code == 0 and "mean return" in out, err

    loaded = rl_gpu.load(run / "best.pt")
    assert isinstance(loaded.policy, ToyLinear)
    obs = torch.randn(32, 4)
    mask = torch.rand(32, 2) > 0.3
    mask[:, 0] |= ~mask.any(-1)
    expected = loaded.act(obs, mask)
    assert expected.shape == (32,) and bool(mask.gather(1, expected[:, None]).all())

    scripted = torch.jit.load(io.BytesIO(to_torchscript_bytes(loaded.policy)))
    assert torch.equal(scripted(obs, mask), expected)
    assert torch.equal(DeterministicPolicy(loaded.policy)(obs, mask), expected)
    pytest.importorskip("onnxruntime")
    from rl_gpu.interop.export import to_onnx_bytes
    import onnxruntime as ort

    session = ort.InferenceSession(to_onnx_bytes(loaded.policy), providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": obs.numpy(), "action_mask": mask.numpy()})[0]
    assert torch.equal(torch.from_numpy(got), expected)

    unregister_policy_kind("toy_linear")
    with pytest.raises(CheckpointError, match="unknown policy kind 'toy_linear'; known: 'categorical'"):
        rl_gpu.load(run / "best.pt")


def test_what_a_kind_cannot_do_is_refused_before_anything_is_written(toy_kind, tmp_path, call_main):
    call = call_main
    from rl_gpu.cli.train import main as train

    for args, needle in [(["--policy", "nope", "--env", "CartPole-v1"], "--policy 'nope' is not a registered policy kind; known: auto,"),
                         (["--policy", "toy_linear", "--env", "Pendulum-v1"],
                          "policy kind 'toy_linear' takes discrete actions; the environment's are continuous"),
                         (["--policy", "toy_linear", "--algo", "sac", "--env", "Pendulum-v1"],
                          "--policy toy_linear does not apply to --algo sac"),
                         (["--policy", "squashed_gaussian", "--env", "Pendulum-v1"],
                          "'squashed_gaussian' is built by its own algorithm")]:
        code, _, err = call(train, *TINY, *args, "--output", tmp_path / "refused")
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "refused").exists()
    assert "toy_linear" in policy_kind_names()


def test_the_kind_is_checked_when_registered():
    for bad in [dict(name="auto"), dict(factory="no colon"), dict(keys={"obs_dim": dict}),
                dict(required=("missing",)), dict(actions="both")]:
        with pytest.raises(ValueError):
            PolicyKind(**{**KIND.__dict__, **bad})
