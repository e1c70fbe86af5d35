"""The CPU fast paths of the policy and the update agree with the plain PyTorch forms they replace."""

import copy

import pytest
import torch
from torch import nn

from rl_gpu.algos.optim import clip_grad_norm
from rl_gpu.envs.registry import make
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.nn import layers as plain_layers
from rl_gpu.nn.cpu_kernels import MLP, Tanh, plain_modules, use_cpu_kernels


def mlp(*args, **kwargs) -> MLP:
    """The tanh MLP with the CPU kernels swapped in (what the algorithms train on the CPU)."""
    return use_cpu_kernels(plain_layers.mlp(*args, **kwargs))


def relu_mlp(*args, **kwargs) -> MLP:
    return use_cpu_kernels(plain_layers.relu_mlp(*args, **kwargs))


def _plain(net: MLP) -> nn.Sequential:
    """The same layers as a plain ``nn.Sequential`` with ``torch.tanh``."""
    return nn.Sequential(*[nn.Tanh() if isinstance(m, nn.Tanh) else m for m in net])


@pytest.mark.parametrize("rows", [8, 127, 128, 1024])
def test_tanh_matches_torch_tanh_in_value_and_gradient(rows):
    # 64 columns: below 128 rows torch.tanh itself runs, from 128 rows up the sigmoid form.
    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 64, generator=g) * 3).requires_grad_()
    ref = x.detach().clone().requires_grad_()
    grad = torch.randn(rows, 64, generator=g)
    y = Tanh()(x)
    y.backward(grad)
    torch.tanh(ref).backward(grad)
    torch.testing.assert_close(y, torch.tanh(ref), atol=3e-7, rtol=0)
    # d/dx = 1 - y^2: a 3e-7 difference in y moves it by up to 6e-7, times |grad| (a few units).
    torch.testing.assert_close(x.grad, ref.grad, atol=3e-6, rtol=0)
    assert (rows * 64 >= Tanh.SIGMOID_FROM) == (y.grad_fn.name() != "TanhBackward0")


def test_rational_tanh_matches_float64_tanh_everywhere():
    from rl_gpu.nn.cpu_kernels import _tanh_rational

    x = torch.linspace(-20, 20, 400_001, dtype=torch.float64)
    y = _tanh_rational(x.float()).double()
    assert (y - torch.tanh(x)).abs().max() < 3.5e-7
    assert y.abs().max() <= 1.0 and torch.equal(y.sign(), x.sign())  # 1 - y^2 >= 0: no gradient turns round
    tiny = torch.logspace(-30, -3, 500, dtype=torch.float64)
    assert ((_tanh_rational(tiny.float()).double() - torch.tanh(tiny)).abs() / tiny).max() < 3e-7


@pytest.mark.slow
def test_compiled_mlp_takes_the_rational_form_and_matches_eager():
    """Compiled for the CPU, the tanh MLP evaluates the rational form (no exponential in the generated code)
    and agrees with the eager network in value and gradient, with and without gradients."""
    torch.manual_seed(3)
    net = mlp(4, (64, 64), 2, out_gain=1.0)
    x = torch.randn(4096, 4) * 3
    grad = torch.randn(4096, 2)

    def value_and_grads(fn):
        net.zero_grad()
        y = fn(x)
        y.backward(grad)
        with torch.no_grad():
            y_nograd = fn(x)
        return y.detach(), y_nograd, [p.grad.clone() for p in net.parameters()]

    eager = value_and_grads(net)
    torch._dynamo.reset()
    compiled = value_and_grads(torch.compile(net, backend="inductor"))
    torch.testing.assert_close(compiled[0], eager[0], atol=2e-6, rtol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], atol=2e-6, rtol=1e-6)
    for g_compiled, g_eager in zip(compiled[2], eager[2]):
        torch.testing.assert_close(g_compiled, g_eager, atol=1e-5 * g_eager.abs().max().item(), rtol=0)
    seen = []
    backend = lambda gm, inputs: seen.append(gm.print_readable(print_output=False)) or gm.forward  # noqa: E731
    for grad_mode in (True, False):
        torch._dynamo.reset()
        with torch.set_grad_enabled(grad_mode):
            torch.compile(net, backend=backend)(x)
        assert "clamp" in seen[-1] and "sigmoid" not in seen[-1] and "torch.tanh" not in seen[-1]


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2), (64, 1), (17, 256)])
@pytest.mark.parametrize("lead", [(300,), (5, 7)])
def test_linear_gradients_match_autograd_of_f_linear(shape, lead):
    """The weight gradient taken in the other orientation is the same sum: equal up to float32 rounding."""
    from rl_gpu.nn.cpu_kernels import _Linear, linear

    in_features, out_features = shape
    g = torch.Generator().manual_seed(in_features * out_features)
    x = torch.randn(*lead, in_features, generator=g).requires_grad_()
    weight = torch.randn(out_features, in_features, generator=g).requires_grad_()
    bias = torch.randn(out_features, generator=g).requires_grad_()
    grad = torch.randn(*lead, out_features, generator=g)
    assert (linear(x, weight, bias).grad_fn.name() == "_LinearBackward") == (in_features < out_features)
    y = _Linear.apply(x, weight, bias)
    ours = torch.autograd.grad(y, (x, weight, bias), grad)
    ref = torch.autograd.grad(torch.nn.functional.linear(x, weight, bias), (x, weight, bias), grad)
    assert torch.equal(y, torch.nn.functional.linear(x, weight, bias)) and torch.equal(ours[0], ref[0])
    for a, b in zip(ours[1:], ref[1:]):
        assert a.is_contiguous() and a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=0)
    # Under vmap (a population's forward and backward) it runs through its vmap rule (the stacked node).
    xs, grads = x.detach().expand(3, *x.shape).clone().requires_grad_(), grad.expand(3, *grad.shape)
    ys = torch.func.vmap(lambda t: _Linear.apply(t, weight, bias))(xs)
    (gx,) = torch.autograd.grad(ys, (xs,), grads)
    torch.testing.assert_close(gx[1], ref[0])
    with torch.no_grad():
        assert linear(x, weight, bias).grad_fn is None


@pytest.mark.parametrize("shape", [(64, 1), (64, 2), (3, 4)])
@pytest.mark.parametrize("lead", [(300,), (5, 7)])
def test_narrow_layer_input_gradient_as_multiply_adds_matches_autograd(shape, lead):
    """A head's input gradient ``g W`` as O broadcast multiply-adds (compiled CPU form): the same sums."""
    from rl_gpu.nn.cpu_kernels import _NarrowLinear

    in_features, out_features = shape
    g = torch.Generator().manual_seed(in_features + out_features)
    x = torch.randn(*lead, in_features, generator=g).requires_grad_()
    weight = torch.randn(out_features, in_features, generator=g).requires_grad_()
    bias = torch.randn(out_features, generator=g).requires_grad_()
    grad = torch.randn(*lead, out_features, generator=g)
    y = _NarrowLinear.apply(x, weight, bias)
    ours = torch.autograd.grad(y, (x, weight, bias), grad)
    ref = torch.autograd.grad(torch.nn.functional.linear(x, weight, bias), (x, weight, bias), grad)
    assert torch.equal(y, torch.nn.functional.linear(x, weight, bias))
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=0)


@pytest.mark.parametrize("lead", [(300,), (5, 70)])
def test_fused_linear_tanh_is_the_sigmoid_form_bit_for_bit_with_tanh_gradients(lead):
    from rl_gpu.nn.cpu_kernels import _LinearTanh

    g = torch.Generator().manual_seed(len(lead))
    x = (torch.randn(*lead, 9, generator=g) * 2).requires_grad_()
    weight = torch.randn(64, 9, generator=g).requires_grad_()
    bias = torch.randn(64, generator=g).requires_grad_()
    grad = torch.randn(*lead, 64, generator=g)
    y = _LinearTanh.apply(x, weight, bias)
    with torch.no_grad():
        assert torch.equal(y, torch.sigmoid(2.0 * torch.nn.functional.linear(x, weight, bias)) * 2.0 - 1.0)
    ours = torch.autograd.grad(y, (x, weight, bias), grad)
    ref = torch.autograd.grad(torch.tanh(torch.nn.functional.linear(x, weight, bias)), (x, weight, bias), grad)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, atol=3e-6 * max(1.0, b.abs().max().item()), rtol=0)
    xs = x.detach().expand(2, *x.shape).clone().requires_grad_()
    (gx,) = torch.autograd.grad(torch.func.vmap(lambda t: _LinearTanh.apply(t, weight, bias))(xs), (xs,),
                                grad.expand(2, *grad.shape))
    torch.testing.assert_close(gx[0], ref[0], atol=3e-6 * ref[0].abs().max().item(), rtol=0)


@pytest.mark.parametrize("lead", [(1024,), (8, 70)])
def test_onednn_linear_tanh_matches_tanh_of_linear_in_value_and_gradient(lead, monkeypatch):
    """From ONEDNN_FROM output elements the fused node's forward is oneDNN's linear + tanh, with and without
    gradients (the MLP's no-grad form too), within float32 rounding of ``tanh(F.linear)``. Switched on here
    whatever this CPU's default (an AVX2-only CPU leaves it off)."""
    from rl_gpu.nn import cpu_kernels as layers

    if not layers._onednn_available():
        pytest.skip("this torch build cannot run oneDNN's fused linear")
    monkeypatch.setattr(layers, "USE_ONEDNN", True)
    g = torch.Generator().manual_seed(len(lead))
    x = (torch.randn(*lead, 64, generator=g)).requires_grad_()
    weight = (torch.randn(64, 64, generator=g) * 0.2).requires_grad_()
    bias = torch.randn(64, generator=g).requires_grad_()
    grad = torch.randn(*lead, 64, generator=g)
    assert layers._onednn_applies(x, weight)
    y = layers._LinearTanh.apply(x, weight, bias)
    ref_y = torch.tanh(torch.nn.functional.linear(x, weight, bias))
    torch.testing.assert_close(y, ref_y, atol=2e-7, rtol=0)
    ours = torch.autograd.grad(y, (x, weight, bias), grad)
    ref = torch.autograd.grad(ref_y, (x, weight, bias), grad)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, atol=3e-6 * max(1.0, b.abs().max().item()), rtol=0)
    torch.manual_seed(0)
    net = mlp(64, (64, 64), 2, out_gain=1.0)
    with torch.no_grad():
        assert net._sigmoid_form(x)
        torch.testing.assert_close(net(x), _plain(net)(x), atol=1e-6, rtol=0)
    # Under a functorch transform the op has no rule: the sigmoid form runs instead.
    assert not torch.func.vmap(lambda t: torch.tensor(layers._onednn_applies(t, weight)))(x.detach()[None])


def test_mlp_fuses_linear_and_tanh_only_where_the_sigmoid_form_runs():
    net = mlp(4, (64, 64), 2, out_gain=1.0)
    def names(y):  # every node of y's autograd graph
        seen, todo = {}, [y.grad_fn]
        while todo:
            node = todo.pop()
            if node is not None and id(node) not in seen:
                seen[id(node)] = node.name()
                todo += [f for f, _ in node.next_functions]
        return set(seen.values())

    assert "_LinearTanhBackward" in names(net(torch.randn(4096, 4)))
    small = net(torch.randn(8, 4))  # 8 x 64 elements: torch.tanh's own kernel
    assert "_LinearTanhBackward" not in names(small) and "_LinearBackward" in names(small)  # the 4 -> 64 layer


def test_tanh_form_under_vmap_keeps_its_gradient():
    """Under vmap (a population's forward) a tensor on the autograd tape reports requires_grad False: the form
    must still not work in place on a saved output."""
    x = (torch.randn(2, 256, 64, generator=torch.Generator().manual_seed(0)) * 2).requires_grad_()
    grad = torch.randn(2, 256, 64, generator=torch.Generator().manual_seed(1))
    torch.func.vmap(Tanh())(x * 1.0).backward(grad)
    ref = x.detach().clone().requires_grad_()
    torch.tanh(ref).backward(grad)
    torch.testing.assert_close(x.grad, ref.grad, atol=3e-6, rtol=0)


@pytest.mark.parametrize("rows", [8, 127, 128, 1024, 4096])
@pytest.mark.parametrize("hidden", [(64, 64), (32, 256, 16)])
def test_mlp_sigmoid_form_matches_torch_tanh_in_value_and_gradient(rows, hidden):
    """Without gradients the folded form, with them the layers one by one: both against float64 tanh."""
    torch.manual_seed(rows)
    net = mlp(5, hidden, 3, out_gain=1.0)
    truth = _plain(copy.deepcopy(net)).double()
    x = torch.randn(rows, 5) * 3
    grad = torch.randn(rows, 3)
    with torch.no_grad():
        folded = net(x)
        assert net._sigmoid_form(x) == (rows * hidden[0] >= MLP.SIGMOID_FROM)
        if not net._sigmoid_form(x):  # layer by layer, each Tanh choosing its own form
            assert torch.equal(folded, nn.Sequential(*net)(x))
    assert not net._sigmoid_form(x)  # gradients enabled
    y = net(x)
    y.backward(grad)
    y_truth = truth(x.double())
    y_truth.backward(grad.double())
    torch.testing.assert_close(folded.double(), y_truth, atol=2e-6, rtol=1e-6)
    torch.testing.assert_close(y.double(), y_truth, atol=2e-6, rtol=1e-6)
    # Gradients are sums over rows: float32's own rounding grows with them, so the tolerance is relative to the
    # largest entry (plain float32 tanh is off float64 by the same order, about 1e-6 of it).
    for (name, p), p_truth in zip(net.named_parameters(), truth.parameters()):
        scale = p_truth.grad.abs().max().item()
        torch.testing.assert_close(p.grad.double(), p_truth.grad, atol=1e-5 * scale, rtol=0, msg=name)


@torch.no_grad()
def test_mlp_sigmoid_form_only_for_tanh_mlps_on_cpu():
    x = torch.randn(1024, 4)
    assert mlp(4, (64,), 2, out_gain=1.0)._sigmoid_form(x)
    assert not relu_mlp(4, (64,), 2)._sigmoid_form(x)
    assert not MLP(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))._sigmoid_form(x)  # only rl_gpu's Tanh marks it
    assert not MLP(nn.Linear(4, 64, bias=False), Tanh(), nn.Linear(64, 2))._sigmoid_form(x)
    assert not MLP(nn.Linear(4, 64), Tanh())._sigmoid_form(x)


def test_mlp_forward_is_the_sequential_forward():
    torch.manual_seed(0)
    policy = use_cpu_kernels(ActorCritic(4, 2))
    assert isinstance(policy.actor, MLP)
    plain = nn.Sequential(*policy.actor)
    assert list(policy.actor.state_dict()) == list(plain.state_dict())
    small = torch.randn(100, 4)
    assert torch.equal(policy.actor(small), plain(small))
    large = torch.randn(300, 4)
    torch.testing.assert_close(policy.actor(large), plain(large), atol=2e-6, rtol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(policy.actor(large), plain(large), atol=2e-6, rtol=1e-6)


def test_log_prob_and_entropy_from_one_log_softmax():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(500, 5, generator=g) * 4
    mask = torch.rand(500, 5, generator=g) < 0.6
    mask[:, 2] = True
    action = D.categorical_sample(logits, mask, g)
    for m in (mask, None):
        log_prob, entropy = D.categorical_log_prob_entropy(logits, m, action)
        assert torch.equal(log_prob, D.categorical_log_prob(logits, m, action))
        assert torch.equal(entropy, D.categorical_entropy(logits, m))


@pytest.mark.parametrize("scale", [1e-3, 10.0])
def test_clip_grad_norm_matches_torch(scale):
    g = torch.Generator().manual_seed(4)
    grads = [torch.randn(shape, generator=g) * scale for shape in ((64, 4), (64,), (64, 64), (2, 64), (2,))]
    ref = [t.clone() for t in grads]
    norm = clip_grad_norm(grads, 0.5)
    params = [nn.Parameter(torch.zeros_like(t)) for t in ref]
    for p, t in zip(params, ref):
        p.grad = t
    ref_norm = nn.utils.clip_grad_norm_(params, 0.5)
    torch.testing.assert_close(norm, ref_norm)
    for a, p in zip(grads, params):
        torch.testing.assert_close(a, p.grad)


def test_autoreset_env_refuses_injected_finished_rows():
    env = make("CartPole-v1", num_envs=3, seed=0)
    state = env.get_state()
    env.set_state(state)
    with pytest.raises(ValueError, match="autoreset=False"):
        env.set_state(state._replace(done=torch.tensor([False, True, False])))
    frozen = make("CartPole-v1", num_envs=3, seed=0, autoreset=False)
    frozen.set_state(frozen.get_state()._replace(done=torch.tensor([False, True, False])))
    before = frozen.get_state()
    frozen.step(torch.tensor([1, 1, 1]))
    assert torch.equal(frozen.state.inner.x[1], before.inner.x[1]) and frozen.state.episode_step[1] == 0


def test_cpu_tanh_form_runs_under_vmap_and_grad_over_a_population() -> None:
    """A population of networks trained as one (``torch.func`` over stacked parameters) goes through the CPU
    sigmoid form of tanh and its custom backward: gradients equal each member's own."""
    from torch.func import functional_call, grad, stack_module_state, vmap

    torch.manual_seed(0)
    members = [mlp(4, (64, 64), 2, out_gain=1.0) for _ in range(3)]
    x = torch.randn(256, 4)
    assert x.shape[0] * 64 >= MLP.SIGMOID_FROM  # the hidden activations take the sigmoid form
    params, buffers = stack_module_state(members)
    template = copy.deepcopy(members[0]).to("meta")

    def loss(p, b, obs):
        return functional_call(template, (p, b), (obs,)).square().mean()

    grads = vmap(grad(loss), in_dims=(0, 0, None))(params, buffers, x)
    for k, member in enumerate(members):
        member.zero_grad()
        member(x).square().mean().backward()
        for name, p in member.named_parameters():
            torch.testing.assert_close(grads[name][k], p.grad, rtol=1e-5, atol=1e-6)


def test_population_update_takes_the_fused_nodes_under_vmap() -> None:
    """A population's update (``vmap`` over ``functional_call`` with stacked parameters on the tape, then one
    ``backward``, as ``PopulationPPO`` runs it) goes through the fused Linear + tanh node, although under vmap a
    weight on the tape reports ``requires_grad`` False, in its stacked form (one node and one batched product per
    layer for all members); the gradients equal each member's own."""
    from torch.func import functional_call, vmap

    torch.manual_seed(0)
    members = [mlp(4, (64, 64), 2, out_gain=1.0) for _ in range(3)]
    x = torch.randn(3, 512, 4)
    template = copy.deepcopy(members[0]).to("meta")
    params = {name: torch.stack([dict(m.named_parameters())[name] for m in members]).detach().requires_grad_()
              for name, _ in members[0].named_parameters()}
    y = vmap(lambda p, obs: functional_call(template, p, (obs,)))(params, x)
    seen, todo = set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [f for f, _ in node.next_functions]
    names = [node.name() for node in seen]
    assert names.count("_StackedLinearTanhBackward") == 2, names  # one node per layer for all members
    with torch.no_grad():  # collection: the folded sigmoid form under vmap
        folded = vmap(lambda p, obs: functional_call(template, p, (obs,)))(params, x)
    torch.testing.assert_close(folded, y.detach(), atol=1e-5, rtol=0)
    y.square().mean(dim=(1, 2)).sum().backward()
    for k, member in enumerate(members):
        member(x[k]).square().mean().backward()
        for name, p in member.named_parameters():
            torch.testing.assert_close(params[name].grad[k], p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("fused", "out"), [("_Linear", 64), ("_LinearTanh", 64), ("_Linear", 2), ("_Linear", 1)])
@pytest.mark.parametrize("dims", [(0, 0, 0), (1, None, None), (None, 0, 0), (2, 0, None)])
@pytest.mark.parametrize("n", [6, 120])
def test_stacked_vmap_rule_matches_each_member_alone(fused, out, dims, n):
    """The vmap rule of the fused linear nodes (every operand moved or expanded to a leading member dimension,
    then one batched node): outputs and gradients equal a loop over members of the plain form, whatever the
    vmapped dimensions, for a [T, N, I] input, and under a vmap nested in another; heads of 1 and 2 outputs
    too (their stacked forward takes the transposed product, a 1-output input gradient a broadcast multiply)."""
    import rl_gpu.nn.cpu_kernels as layers

    node = getattr(layers, fused)
    plain = ((lambda x, w, b: torch.nn.functional.linear(x, w, b)) if fused == "_Linear"
             else (lambda x, w, b: torch.tanh(torch.nn.functional.linear(x, w, b))))
    k, g = 3, torch.Generator().manual_seed(7)
    x_dim, w_dim, b_dim = dims
    x = torch.randn(5, n, 4, generator=g)
    x = x.unsqueeze(x_dim).expand(*x.shape[:x_dim], k, *x.shape[x_dim:]).clone() if x_dim is not None else x
    w = torch.randn(k, out, 4, generator=g) if w_dim is not None else torch.randn(out, 4, generator=g)
    b = torch.randn(k, out, generator=g) if b_dim is not None else torch.randn(out, generator=g)
    x = (x + 0.1 * torch.randn(x.shape, generator=g)).requires_grad_()
    w, b = w.requires_grad_(), b.requires_grad_()
    y = torch.func.vmap(node.apply, in_dims=dims)(x, w, b)
    grad = torch.randn(y.shape, generator=g)
    ours = torch.autograd.grad(y, (x, w, b), grad)

    def member(i):
        return [t.select(d, i) if d is not None else t for t, d in zip((x, w, b), dims)]

    ref_y = torch.stack([plain(*member(i)) for i in range(k)])
    ref = torch.autograd.grad(ref_y, (x, w, b), grad)
    torch.testing.assert_close(y, ref_y, atol=1e-6, rtol=0)
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a, r, atol=1e-5 * max(1.0, r.abs().max().item()), rtol=0)
    # Nested: members of members, the inner vmap over the second dimension of everything.
    xs, ws, bs = (t.detach().expand(2, *t.shape).clone() for t in (x, w, b))
    nested = torch.func.vmap(torch.func.vmap(node.apply, in_dims=dims))(xs, ws, bs)
    torch.testing.assert_close(nested[1], y.detach(), atol=1e-6, rtol=0)


def test_networks_are_plain_until_the_cpu_pass_and_back():
    """The definitions are plain PyTorch; the pass swaps the CPU forms in without touching parameters, only on
    the CPU, and plain_modules swaps them out (what exports hold)."""
    torch.manual_seed(0)
    policy = ActorCritic(4, 2)
    assert type(policy.actor) is nn.Sequential and type(policy.actor[1]) is nn.Tanh
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    use_cpu_kernels(policy)
    assert type(policy.actor) is MLP and type(policy.actor[1]) is Tanh and type(policy.critic) is MLP
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    plain_modules(policy)
    assert type(policy.actor) is nn.Sequential and type(policy.actor[1]) is nn.Tanh
    meta = ActorCritic(4, 2).to("meta")
    assert type(use_cpu_kernels(meta).actor) is nn.Sequential  # not on the CPU: left plain
