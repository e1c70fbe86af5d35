"""The boolean-frame linear layer (rl_gpu.nn.frame_kernels): its C kernel's sums equal the dense product's, its
gradients autograd's, and the networks hand it their frames only where it applies. (Compiled code calling it,
equal to eager: tests/algos/test_update_fast_paths.py.)"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.nn import functional as F

from rl_gpu.nn import frame_kernels as fk
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.nn.composed import ComposedActorCritic
from rl_gpu.nn.cpu_kernels import use_cpu_kernels

pytestmark = pytest.mark.skipif(not fk.available(), reason="no C compiler to build the frame kernel")


def frames(rows: int, inputs: int, seed: int = 0, density: float = 0.1) -> torch.Tensor:
    return torch.rand(rows, inputs, generator=torch.Generator().manual_seed(seed)) < density


# Every fixed width of the kernel (16, 32, 64), the forward pass in blocks of 64 (128, 256) and the generic loop
# (48, and the weight gradients at 128 and 256); inputs that are not a multiple of the eight bytes read at once (a
# tail), and rows all set or all clear.
@pytest.mark.parametrize("inputs,outputs", [(400, 64), (600, 64), (131, 16), (257, 32), (203, 48), (400, 128),
                                            (131, 256)])
def test_forward_and_gradients_equal_the_dense_products(inputs, outputs):
    x = frames(300, inputs, seed=inputs + outputs)
    x[0] = True
    x[1] = False
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(outputs, inputs, generator=g, requires_grad=True)
    bias = torch.randn(outputs, generator=g, requires_grad=True)
    assert fk.applies(x, weight, bias)
    y = fk.frame_linear(x, weight, bias)
    want = F.linear(x.float(), weight, bias)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=2e-5)
    grad = torch.randn(300, outputs, generator=g)
    got_w, got_b = torch.autograd.grad(y, (weight, bias), grad)
    want_w, want_b = torch.autograd.grad(want, (weight, bias), grad)
    torch.testing.assert_close(got_w, want_w, rtol=1e-5, atol=5e-5)
    torch.testing.assert_close(got_b, want_b)


def test_untrained_weights_take_the_operator_without_autograd():
    """Without gradients (a rollout, an evaluation) the layer calls ``rl_gpu::frame_linear_infer``: the same
    sums, for any leading dimensions, with a schema and fake form compiled code can call."""
    x = frames(3 * 40, 200, seed=3).reshape(3, 40, 200)
    weight, bias = torch.randn(64, 200, requires_grad=True), torch.randn(64, requires_grad=True)
    calls = []
    forward = fk._forward
    with torch.no_grad():
        torch.testing.assert_close(fk.frame_linear(x, weight, bias), F.linear(x.float(), weight, bias), rtol=0,
                                   atol=2e-5)
        torch.library.opcheck(torch.ops.rl_gpu.frame_linear_infer.default, (x, weight.detach().t(), bias.detach()),
                              test_utils=("test_schema", "test_faketensor"))
    assert fk.frame_linear(x, weight, bias).requires_grad  # trained: the operator with its gradient
    fk._LIB.impl("frame_linear_infer", lambda *a: calls.append(1) or forward(*a), "CPU", allow_override=True)
    try:
        with torch.no_grad():
            fk.frame_linear(x, weight, bias)
        fk.frame_linear(x, weight, bias)
    finally:
        fk._LIB.impl("frame_linear_infer", forward, "CPU", allow_override=True)
    assert calls == [1]


def test_leading_dimensions_and_gradients_through_the_custom_operator_check():
    x = frames(2 * 160, 136).reshape(2, 160, 136)
    weight = torch.randn(16, 136, dtype=torch.float64)
    assert not fk.applies(x, weight, torch.zeros(16, dtype=torch.float64))  # float32 only
    weight, bias = torch.randn(16, 136), torch.randn(16)
    y = fk.frame_linear(x, weight, bias)
    assert y.shape == (2, 160, 16)
    torch.testing.assert_close(y, F.linear(x.float(), weight, bias), rtol=0, atol=1e-5)
    # The registration's schema, fake (meta) form and autograd formula; compiled code calling it through AOT
    # dispatch is tests/algos/test_update_fast_paths.py's compiled loss.
    torch.library.opcheck(fk.frame_linear_op, (x.reshape(-1, 136), weight.t().requires_grad_(), bias.requires_grad_()),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_the_operators_refuse_what_the_kernel_cannot_read():
    x, weight_t, bias = frames(4, 136), torch.randn(136, 8), torch.randn(8)
    for args in ((x.float(), weight_t, bias), (x, weight_t.double(), bias), (x, torch.randn(135, 8), bias),
                 (x, torch.randn(8, 136), bias), (x, weight_t, torch.randn(7))):
        with pytest.raises(ValueError, match="frame_linear takes CPU tensors"):
            torch.ops.rl_gpu.frame_linear(*args)
        with pytest.raises(ValueError, match="frame_linear takes CPU tensors"):
            torch.ops.rl_gpu.frame_linear_infer(*args)
    for x_, grad in ((x, torch.randn(3, 8)), (x.to(torch.uint8), torch.randn(4, 8))):
        with pytest.raises(ValueError, match="weight gradient takes CPU tensors"):
            torch.ops.rl_gpu.frame_linear_weight_grad(x_, grad)


def test_small_layers_threads_and_autocast_take_the_dense_product(monkeypatch):
    weight, bias = torch.randn(8, 400, requires_grad=True), torch.randn(8, requires_grad=True)
    assert fk.applies(frames(256, 400), weight, bias)
    assert not fk.applies(frames(255, 400), weight, bias)  # too few rows for a trained weight
    with torch.no_grad():  # not trained: eager code runs it from INFER_FROM rows, compiled code from FRAME_FROM's
        assert fk.applies(frames(32, 400), weight, bias) and not fk.applies(frames(31, 400), weight, bias)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        assert not fk.applies(frames(255, 400), weight, bias) and fk.applies(frames(256, 400), weight, bias)
        monkeypatch.undo()
    weight, bias = weight.detach(), bias.detach()
    assert fk.applies(frames(32, 400), weight, bias)
    assert not fk.applies(frames(256, 127), torch.randn(8, 127), bias)  # too few inputs
    assert not fk.applies(frames(256, 400).float(), weight, bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fk.applies(frames(256, 400), weight, bias)
    torch.set_num_threads(2)  # conftest runs every test on one thread
    try:
        assert not fk.applies(frames(256, 400), weight, bias)
    finally:
        torch.set_num_threads(1)


def test_networks_keep_frames_boolean_only_where_they_take_them():
    plain = ActorCritic(400, 6, (64, 64))
    assert not plain.takes_bool_frames()
    fast = use_cpu_kernels(ActorCritic(400, 6, (64, 64)))
    assert fast.takes_bool_frames()
    assert not use_cpu_kernels(ActorCritic(400, 6, (64, 64), normalize_obs=True)).takes_bool_frames()
    fast.load_state_dict(plain.state_dict())
    obs = frames(512, 400)
    assert fast.preprocess(obs).dtype == torch.bool
    action = torch.randint(0, 6, (512,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for got, want in zip(fast.evaluate(obs, action), plain.evaluate(obs, action)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    fk.USE_FRAME_KERNEL = False
    try:  # the kernel switched off: the frames as floats, the same numbers
        assert not fast.takes_bool_frames() and fast.preprocess(obs).dtype == torch.float32
        with torch.no_grad():
            torch.testing.assert_close(fast.value(obs), plain.value(obs), rtol=0, atol=1e-5)
    finally:
        fk.USE_FRAME_KERNEL = True


def test_the_composed_policy_hands_its_mlp_encoders_the_frames_as_they_are():
    plain = ComposedActorCritic((10, 10, 4), num_actions=6)
    fast = use_cpu_kernels(ComposedActorCritic((10, 10, 4), num_actions=6))
    fast.load_state_dict(plain.state_dict())
    assert fast.takes_bool_frames() and not plain.takes_bool_frames()
    assert not use_cpu_kernels(ComposedActorCritic((10, 10, 4), num_actions=6, channels=(16,))).takes_bool_frames()
    obs = frames(512, 400).reshape(512, 10, 10, 4)
    assert fast.preprocess(obs).dtype == torch.bool
    action = torch.randint(0, 6, (512,), generator=torch.Generator().manual_seed(0))
    for got, want in zip(fast.evaluate(obs, action), plain.evaluate(obs, action)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_an_actors_and_a_critics_first_layers_collect_in_one_kernel_call(monkeypatch):
    """Without gradients (collecting, evaluating) the composed policy's two MLP encoders take the frames in one
    call of the kernel on their stacked weights, from ``INFER_FROM`` rows in compiled code too (where one layer
    alone keeps the dense product below ``FRAME_FROM``): the same decisions as the dense products. Trained weights
    (the update) keep a call per encoder."""
    plain = ComposedActorCritic((10, 10, 4), num_actions=6)
    fast = use_cpu_kernels(ComposedActorCritic((10, 10, 4), num_actions=6))
    fast.load_state_dict(plain.state_dict())
    library, calls = fk._library(), []

    class Counting:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(library, name)

    monkeypatch.setattr(fk, "_library", Counting)
    obs = frames(64, 400, seed=5).reshape(64, 10, 10, 4)
    noise = torch.rand(64, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = fast.act(obs, noise=noise), plain.act(obs, noise=noise)
        assert calls == ["rl_gpu_frame_linear"]
        assert torch.equal(got.action, want.action)
        torch.testing.assert_close(got.log_prob, want.log_prob, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.value, want.value, rtol=0, atol=1e-5)
        actor, critic = fast.actor_encoder.layers[0], fast.critic_encoder.layers[0]
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        flat = obs.reshape(64, 400)
        assert fk.pair_applies(flat, actor, critic) and not fk.applies(flat, actor.weight, actor.bias)
        assert not fk.pair_applies(flat[:fk.INFER_FROM - 1], actor, critic)
        monkeypatch.undo()
        monkeypatch.setattr(fk, "_library", Counting)
        fk.PAIR_FIRST_LAYERS = False
        try:  # the switch off: a call per encoder
            calls.clear()
            fast.act(obs, noise=noise)
            assert calls == ["rl_gpu_frame_linear"] * 2
        finally:
            fk.PAIR_FIRST_LAYERS = True
    calls.clear()
    obs = frames(256, 400, seed=6).reshape(256, 10, 10, 4)
    assert not fk.pair_applies(obs.reshape(256, 400), actor, critic)
    fast.evaluate(obs, torch.zeros(256, dtype=torch.long))
    assert calls == ["rl_gpu_frame_linear"] * 2


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """The kernel built again into ``tmp_path / "cache"`` (the cached library forgotten before and after)."""
    monkeypatch.setenv("RL_GPU_CACHE_DIR", str(tmp_path / "cache"))
    fk._library.cache_clear()
    yield tmp_path / "cache"
    fk._library.cache_clear()


def test_the_kernel_is_built_into_a_private_folder_and_refused_from_any_other(fresh_build, monkeypatch):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    monkeypatch.setenv("CC", f"env LC_ALL=C {compiler}")  # a command and its arguments, as CC="ccache gcc" names one
    assert fk.available()
    (library,) = fresh_build.iterdir()
    assert library.name.endswith(".so") and (fresh_build.stat().st_mode & 0o777) == 0o700
    fk._library.cache_clear()
    fresh_build.chmod(0o777)  # anyone may write there: nothing is loaded from it
    assert not fk.available()
    fresh_build.chmod(0o700)
    fk._library.cache_clear()
    library.rename(fresh_build / "elsewhere.so")
    library.symlink_to(fresh_build / "elsewhere.so")  # a link in the library's place is not followed
    assert not fk.available()
    x, weight, bias = frames(256, 400), torch.randn(8, 400), torch.randn(8)
    assert not fk.applies(x, weight, bias)
    torch.testing.assert_close(fk.frame_linear(x, weight, bias), F.linear(x.float(), weight, bias))


def test_without_a_working_compiler_the_layer_is_the_dense_product(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "false")
    assert not fk.available()
    assert list(fresh_build.iterdir()) == []  # the failed build left nothing behind
    with pytest.raises(RuntimeError, match="not built on this machine"):
        torch.ops.rl_gpu.frame_linear(frames(4, 136), torch.randn(136, 8), torch.randn(8))
    x, weight, bias = frames(256, 400), torch.randn(8, 400), torch.randn(8)
    torch.testing.assert_close(fk.frame_linear(x, weight, bias), F.linear(x.float(), weight, bias))


def test_ready_is_a_constant_to_compiled_code_without_importing_torchdynamo():
    """``ready`` carries the mark ``torch.compiler.assume_constant_result`` sets (set by hand: importing TorchDynamo
    with the module cost every command 1.5 s; tests/core/test_structure.py checks the command line does not)."""
    def probe() -> bool:
        return True

    marked = torch.compiler.assume_constant_result(probe)
    names = [name for name in vars(marked) if name.startswith("_dynamo")]
    assert names and all(getattr(fk.ready, name) == getattr(marked, name) for name in names)
