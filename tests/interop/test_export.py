"""``rl-gpu export``: ONNX and TorchScript models give the torch policy's deterministic action."""

import copy
import importlib.util
import io
import json

import pytest
import torch

from rl_gpu.__main__ import main as rl_gpu_main
from rl_gpu.runtime.checkpoint import save_checkpoint
from rl_gpu.interop.export import DeterministicPolicy, to_onnx_bytes, to_torchscript_bytes
from rl_gpu.policy import ActorCritic, GaussianActorCritic

HAS_ONNX = all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))
HAS_ONNXSCRIPT = importlib.util.find_spec("onnxscript") is not None
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="needs onnx and onnxruntime (rl-gpu[export])")


def _policy(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "discrete":
        policy = ActorCritic(obs_dim=6, num_actions=4, hidden_sizes=(16, 16), normalize_obs=True)
    else:
        policy = GaussianActorCritic(obs_dim=5, action_dim=3, hidden_sizes=(16, 16), normalize_obs=True)
    # Larger output weights than the 0.01-gain initialisation: no near-ties between logits, so argmax cannot
    # flip on a last-bit difference between runtimes.
    torch.nn.init.normal_(policy.actor[-1].weight, std=1.0)
    policy.update_normalizer(torch.randn(512, policy.obs_dim) * 3 + 1)
    return policy.eval()


def _inputs(policy, n=64):
    generator = torch.Generator().manual_seed(1)
    # Some observations far outside the statistics: the normaliser's clip is exercised.
    obs = torch.randn(n, policy.obs_dim, generator=generator) * 40
    if policy.is_continuous:
        return obs, None
    mask = torch.rand(n, policy.num_actions, generator=generator) < 0.5
    mask[torch.arange(n), torch.randint(0, policy.num_actions, (n,), generator=generator)] = True
    return obs, mask


def _expected(policy, obs, mask):
    with torch.no_grad():
        return policy.act(obs, mask, deterministic=True).action


@needs_onnx
@pytest.mark.parametrize("dynamo", [
    pytest.param(True, marks=pytest.mark.skipif(not HAS_ONNXSCRIPT, reason="needs onnxscript")),
    False,
])
@pytest.mark.parametrize("kind", ["discrete", "gaussian"])
def test_onnx_matches_the_torch_policy(kind, dynamo):
    import onnxruntime as ort

    policy = _policy(kind)
    obs, mask = _inputs(policy)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(to_onnx_bytes(policy, {"env_id": "test"}, dynamo=dynamo), options)
    assert [i.name for i in session.get_inputs()] == ["obs"]
    assert session.get_modelmeta().custom_metadata_map["rl_gpu.env_id"] == '"test"'
    if kind == "discrete":
        assert [i.name for i in session.get_overridable_initializers()] == ["action_mask"]
        (masked,) = session.run(None, {"obs": obs.numpy(), "action_mask": mask.numpy()})
        assert masked.dtype.name == "int64"
        assert torch.equal(torch.from_numpy(masked), _expected(policy, obs, mask))
        (free,) = session.run(None, {"obs": obs.numpy()})
        assert torch.equal(torch.from_numpy(free), _expected(policy, obs, None))
        assert not torch.equal(torch.from_numpy(free), torch.from_numpy(masked))
        (one,) = session.run(None, {"obs": obs[:1].numpy()})
        assert one.shape == (1,)
    else:
        (action,) = session.run(None, {"obs": obs.numpy()})
        expected = _expected(policy, obs, None)
        torch.testing.assert_close(torch.from_numpy(action), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
@pytest.mark.parametrize("kind", ["discrete", "gaussian"])
def test_torchscript_matches_the_torch_policy(kind, tmp_path):
    policy = _policy(kind)
    obs, mask = _inputs(policy)
    path = tmp_path / "policy.pt"
    path.write_bytes(to_torchscript_bytes(policy, {"env_id": "test"}))
    extra = {"rl_gpu.json": ""}
    loaded = torch.jit.load(str(path), _extra_files=extra)
    assert json.loads(extra["rl_gpu.json"])["env_id"] == "test"
    if kind == "discrete":
        assert torch.equal(loaded(obs, mask), _expected(policy, obs, mask))
        assert torch.equal(loaded(obs), _expected(policy, obs, None))
    else:
        # The export uses the exact tanh; training on the CPU uses 2 sigmoid(2x) - 1 (within 2e-7).
        torch.testing.assert_close(loaded(obs), _expected(policy, obs, None), atol=1e-5, rtol=1e-5)


def test_export_leaves_the_training_policy_untouched():
    policy = _policy("discrete").train()
    before = copy.deepcopy(policy.state_dict())
    grads = [p.requires_grad for p in policy.parameters()]
    model = DeterministicPolicy(policy)
    to_torchscript_bytes(policy)
    assert policy.training and [p.requires_grad for p in policy.parameters()] == grads
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert all(a is not b for a, b in zip(model.parameters(), policy.actor.parameters()))
    # No normalisation statistics yet: the exported model takes observations as they are.
    fresh = ActorCritic(obs_dim=6, num_actions=3, normalize_obs=True)
    assert not DeterministicPolicy(fresh).normalize


def _checkpoint(path, policy, env_id="CartPole-v1"):
    save_checkpoint(path, {"env_id": env_id, "policy_config": policy.config(),
                           "algorithm": {"policy": policy.state_dict()}, "update": 3, "global_step": 99})
    return path


def test_cli_writes_both_formats(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt", _policy("discrete"))
    args = ["export", str(ckpt), "--format", "torchscript", "--output", str(tmp_path / "p.ts")]
    assert rl_gpu_main(args) == 0
    assert "action_mask [N, 4] bool (optional)" in capsys.readouterr().out
    assert (tmp_path / "p.ts").stat().st_size > 0
    # The checkpoint may also be given as --checkpoint, as rl-gpu evaluate takes it.
    assert rl_gpu_main(["export", "--checkpoint", str(ckpt), "--format", "torchscript", "--output",
                        str(tmp_path / "q.ts")]) == 0
    assert (tmp_path / "q.ts").read_bytes() == (tmp_path / "p.ts").read_bytes()
    if HAS_ONNX:
        assert rl_gpu_main(["export", str(ckpt), "--output", str(tmp_path / "out" / "p.onnx")]) == 0
        assert (tmp_path / "out" / "p.onnx").stat().st_size > 0


@pytest.mark.parametrize("content, needle", [
    (None, "no such checkpoint"),
    (b"not a checkpoint", "bad.pt: "),
    (b"PK\x03\x04 truncated zip", "not a readable checkpoint"),
])
def test_cli_bad_checkpoint_is_one_line_exit_2(tmp_path, capsys, content, needle):
    ckpt = tmp_path / "bad.pt"
    if content is not None:
        ckpt.write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["export", str(ckpt), "--format", "torchscript", "--output", str(tmp_path / "p.pt")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rl-gpu export: error:") and needle in err and "\n" not in err
    assert not (tmp_path / "p.pt").exists()


def test_cli_refuses_an_unknown_suffix_and_a_policy_less_checkpoint(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt", _policy("gaussian"))
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["export", str(ckpt), "--output", str(tmp_path / "p.bin")])
    assert exit_info.value.code == 2 and "--format" in capsys.readouterr().err
    save_checkpoint(tmp_path / "empty.pt", {"env_id": "CartPole-v1"})
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["export", str(tmp_path / "empty.pt"), "--output", str(tmp_path / "p.pt")])
    assert exit_info.value.code == 2 and "usable policy" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_exporting_a_cuda_policy_leaves_it_on_the_device():
    policy = _policy("gaussian").cuda()
    obs, _ = _inputs(policy)
    loaded = torch.jit.load(io.BytesIO(to_torchscript_bytes(policy)))
    assert all(p.is_cuda for p in policy.parameters()) and policy.obs_rms.mean.is_cuda
    # cuBLAS and the CPU round differently: close, not bit-equal.
    torch.testing.assert_close(loaded(obs), _expected(policy, obs.cuda(), None).cpu(), rtol=1e-4, atol=1e-4)


def _cartpole_policy():
    torch.manual_seed(3)
    policy = ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(64, 64))
    # Decisive logits, as a trained policy has: the 0.01-gain initialisation leaves every state a near-tie.
    torch.nn.init.normal_(policy.actor[-1].weight, std=1.0)
    return policy.eval()


@needs_onnx
def test_int8_export_reports_agreement_and_latency(tmp_path, capsys):
    import onnxruntime as ort

    ckpt = _checkpoint(tmp_path / "best.pt", _cartpole_policy())
    out = tmp_path / "q.onnx"
    assert rl_gpu_main(["export", str(ckpt), "--output", str(out), "--quantize", "int8"]) == 0
    text = capsys.readouterr().out
    agreement = float(text.split("int8 agrees with float on ")[1].split("%")[0])
    assert 90.0 < agreement <= 100.0 and "of 4096 held-out observations" in text
    assert "batch 1 " in text and "batch 1024 " in text and "int8 weights" in text
    session = ort.InferenceSession(out.read_bytes(), providers=["CPUExecutionProvider"])
    assert session.get_modelmeta().custom_metadata_map["rl_gpu.quantized"] == '"int8"'
    ops = {node.op_type for node in __import__("onnx").load(str(out)).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeLinear" in ops
    (action,) = session.run(None, {"obs": torch.zeros(3, 4).numpy()})
    assert action.shape == (3,)


@needs_onnx
def test_int8_continuous_agreement_is_measured_as_action_differences():
    from rl_gpu.interop.quantize import agreement, held_out_observations, quantize_int8

    policy = _policy("gaussian")
    int8 = quantize_int8(to_onnx_bytes(policy, dynamo=False))
    obs = torch.randn(256, policy.obs_dim, generator=torch.Generator().manual_seed(2))
    result = agreement(DeterministicPolicy(policy), int8, obs)
    assert not result.discrete and result.observations == 256
    assert 0.0 < result.mean_abs_diff <= result.max_abs_diff < 0.5
    assert "differ from float by at most" in result.describe()
    obs, mask = held_out_observations(_cartpole_policy(), "CartPole-v1", seed=5, count=100, num_envs=8)
    assert obs.shape == (100, 4) and mask is None and obs.std(0).min() > 0


def _export_error(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["export", *args])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("rl-gpu export: error:") and "\n" not in err, err
    return err


def test_cli_refuses_outputs_it_must_not_write(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt", _policy("discrete"))
    before = ckpt.read_bytes()
    assert "int8 applies to ONNX" in _export_error([str(ckpt), "--output", str(tmp_path / "p.pt"),
                                                    "--quantize", "int8"], capsys)
    assert "is the input" in _export_error([str(ckpt), "--output", str(ckpt), "--format", "torchscript"], capsys)
    (tmp_path / "alias.pt").symlink_to("best.pt")
    assert "is the input" in _export_error([str(ckpt), "--output", str(tmp_path / "alias.pt")], capsys)
    assert "character device" in _export_error([str(ckpt), "--output", "/dev/null", "--format", "onnx"], capsys)
    (tmp_path / "dir.pt").mkdir()
    assert "directory" in _export_error([str(ckpt), "--output", str(tmp_path / "dir.pt")], capsys)
    assert ckpt.read_bytes() == before and (tmp_path / "dir.pt").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.pt", "best.pt", "dir.pt"]


def test_cli_refuses_non_finite_weights(tmp_path, capsys):
    policy = _policy("discrete")
    state = policy.state_dict()
    state["actor.0.weight"][0, 0] = float("nan")
    ckpt = tmp_path / "nan.pt"
    save_checkpoint(ckpt, {"env_id": "CartPole-v1", "policy_config": policy.config(),
                           "algorithm": {"policy": state}})
    assert "NaN or infinite" in _export_error([str(ckpt), "--output", str(tmp_path / "p.pt")], capsys)
    assert not (tmp_path / "p.pt").exists()
