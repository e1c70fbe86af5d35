"""Compare a tensor environment, transition by transition, with N copies of a plain-Python reference.

The generic checks (:mod:`~rl_gpu.envs.testing.contract`) prove that a batch is self-consistent; only a
reference proves that its rules are the intended ones. :func:`check_reference_parity` gives the environment
and each of N scalar references (anything that follows :class:`ScalarReference`) the same state and the same
actions, and raises :class:`~rl_gpu.envs.testing.ParityError` at the first field of the first row that
differs.

Example::

    from rl_gpu.envs import RussianRouletteVectorized
    from rl_gpu.envs.reference import RouletteGame
    from rl_gpu.envs.testing import check_reference_parity

    env = RussianRouletteVectorized(512, seed=0)
    report = check_reference_parity(
        env,
        reference_factory=lambda: RouletteGame(live=0),
        to_reference=RouletteGame.from_row,
        to_inner=RouletteGame.as_row,
        num_steps=50,
    )
    print(report.episodes, "games matched the reference")

A reference can wrap an existing single environment, e.g. Gymnasium's CartPole. Its physics is float64
against our float32 tensors, so rounding differences would grow over an episode; ``resync_every_step``
compares each transition from the same state instead::

    class GymCartPole:
        current_player = 0

        def __init__(self):
            self.env = gymnasium.make("CartPole-v1").unwrapped
            self.env.reset(seed=0)

        def get_state(self):
            return tuple(float(v) for v in self.env.state)

        def set_state(self, state):
            self.env.state = np.array(state, dtype=np.float64)
            self.env.steps_beyond_terminated = None

        def step(self, action):
            _, reward, terminated, _, _ = self.env.step(action)
            return float(reward), terminated

        def observation(self):
            return [float(v) for v in self.env.state]

        def legal_actions(self):
            return [True, True]

    check_reference_parity(
        CartPoleEnv(64, seed=0),
        GymCartPole,
        to_reference=lambda row: tuple(float(v) for v in row),
        num_steps=600,
        resync_every_step=True,
        atol=1e-4,
    )
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_map
from rl_gpu.envs.base import StepResult, TensorEnv
from rl_gpu.envs.testing.compare import check_result, compare
from rl_gpu.envs.testing.drive import inner_row, sample_actions, stack_rows
from rl_gpu.envs.testing.report import CheckReport, ParityError

__all__ = ["ScalarReference", "check_reference_parity"]

_CHECK = "check_reference_parity"


class ScalarReference(Protocol):
    """One environment in plain Python: the ground truth a tensor environment is compared with.

    Single-player references may define ``current_player = 0`` as a class attribute; references of
    continuous-action environments may return ``[]`` from :meth:`legal_actions` (it is not compared).
    """

    current_player: int
    """The seat to act next."""

    def get_state(self) -> Any:
        """An independent copy of the full state (only used to describe a mismatch)."""

    def set_state(self, state: Any) -> None:
        """Replace the full state with (a copy of) ``state``."""

    def step(self, action: Any) -> tuple[Any, bool]:
        """Apply ``action`` (an ``int``, or a list of floats for continuous actions) and return
        ``(reward, terminated)``: a float, or a sequence of one float per seat. Time limits are not the
        reference's business; the harness applies the environment's ``max_episode_steps``."""

    def observation(self) -> Any:
        """The observation of the player to act, as nested sequences of numbers shaped like ``obs_shape``.
        After a terminal step it is the terminal observation."""

    def legal_actions(self) -> Sequence[bool]:
        """One bool per discrete action, True = legal now."""


def check_reference_parity(
    env: TensorEnv,
    reference_factory: Callable[[], ScalarReference],
    to_reference: Callable[[tuple], Any],
    to_inner: Callable[[Any], Any] | None = None,
    *,
    initial_states: Sequence[Any] | None = None,
    num_steps: int = 100,
    seed: int = 0,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    resync_every_step: bool = False,
    action_fn: Callable[[StepResult, torch.Generator], Tensor] | None = None,
) -> CheckReport:
    """Play the same actions in ``env`` and in N scalar references and compare every transition.

    Each step compares ``reward``, ``terminated``, ``truncated`` (from ``env.max_episode_steps``),
    ``final_obs`` (with the reference's observation right after its step), ``episode_length`` and
    ``episode_return`` where an episode ended, then ``obs``, ``action_mask`` and ``current_player`` of the
    state the next action is chosen in. When a row finishes, the environment resets it (auto-reset, or
    :meth:`TensorEnv.reset_rows` when auto-reset is off) and that row's reference is re-synchronised from
    the environment's fresh state through ``to_reference``, which also checks the observation of fresh
    states. Floats are compared with ``atol``/``rtol``, integers and bools exactly. Every result is also
    held to the step-result contract (shapes, dtypes, device, finite values, flags).

    Args:
        env: the environment under test (its current configuration, e.g. ``autoreset``, is used).
        reference_factory: builds one reference; its initial state does not matter, it is always set.
        to_reference: maps one row of the environment's inner state (see
            :func:`~rl_gpu.envs.testing.inner_row`; CPU tensors) to a state the reference's ``set_state``
            accepts.
        to_inner: maps a reference state to one row of the inner state (any form
            :func:`~rl_gpu.envs.testing.stack_rows` accepts). Needed only with ``initial_states``.
        initial_states: N reference states to start from, injected into the environment with
            :meth:`TensorEnv.set_rows` (through ``to_inner``) and into the references with ``set_state``.
            Default: ``env.reset()`` and references synchronised from it.
        num_steps: batched steps to play.
        seed: seeds the CPU action generator (actions reproduce on any device).
        atol: absolute tolerance for float fields.
        rtol: relative tolerance for float fields.
        resync_every_step: set every reference from the environment's state before each step, so that
            each transition is compared on its own (useful when float error would otherwise accumulate,
            e.g. float32 physics against a float64 reference).
        action_fn: ``action_fn(result, generator) -> actions`` chooses the actions instead of uniform
            random legal ones (e.g. a fixed action per row, or a policy).

    Returns:
        A :class:`~rl_gpu.envs.testing.CheckReport`; ``episodes`` counts the episodes that finished.

    Raises:
        ParityError: at the first disagreement, with the row, step, field, the action and the environment
            row's state before the step.
        ValueError: ``initial_states`` has the wrong length or ``to_inner`` is missing.
    """
    n = env.num_envs
    generator = torch.Generator().manual_seed(seed)
    refs = [reference_factory() for _ in range(n)]
    if initial_states is not None:
        states = list(initial_states)
        if len(states) != n:
            raise ValueError(f"initial_states has {len(states)} states, the environment has {n} rows")
        if to_inner is None:
            raise ValueError("initial_states needs to_inner to inject them into the environment")
        env.set_rows(torch.arange(n), stack_rows(env.state.inner, [to_inner(s) for s in states]))
        for ref, state in zip(refs, states):
            ref.set_state(state)
        result = env.observe()
    else:
        result = env.reset()
        _sync_references(refs, env, to_reference, range(n))

    def context(prestate: tuple, action: Tensor | None) -> Callable[[int], str]:
        def describe(row: int) -> str:
            text = f"env row state before the step: {_row_repr(inner_row(prestate, row))}"
            if action is not None:
                text = f"action {action[row].tolist()}; " + text
            return text + f"\n  reference state now: {refs[row].get_state()!r}"

        return describe

    tol = {"atol": atol, "rtol": rtol, "error": ParityError}
    prestate = tree_map(lambda t: t.detach().cpu(), env.state.inner)
    _compare_next(env, result, refs, step=0, context=context(prestate, None), **tol)

    length = torch.zeros(n, dtype=torch.long)
    paid = torch.zeros(env.reward_shape, dtype=torch.float64)
    episodes = 0
    for step in range(1, num_steps + 1):
        if resync_every_step:
            _sync_references(refs, env, to_reference, range(n))
        prestate = tree_map(lambda t: t.detach().cpu(), env.state.inner)
        action = (
            action_fn(result, generator)
            if action_fn is not None
            else sample_actions(env, result.action_mask, generator)
        )
        action_cpu = action.detach().cpu()
        describe = context(prestate, action_cpu)
        rewards, terminals, final_obs = [], [], []
        for i, ref in enumerate(refs):
            a = action_cpu[i].tolist()
            try:
                reward, terminated = ref.step(a)
            except Exception as exc:
                raise ParityError(
                    _CHECK,
                    f"the reference refused action {a} that the environment offered as legal: {exc}",
                    row=i,
                    step=step,
                    context=describe(i),
                ) from exc
            rewards.append(reward)
            terminals.append(bool(terminated))
            final_obs.append(ref.observation())
        result = env.step(action)
        check_result(_CHECK, env, result, step)

        length += 1
        expected_reward = _stack_values(rewards, torch.float64, env.reward_shape)
        paid += expected_reward
        terminated = torch.tensor(terminals, dtype=torch.bool)
        if env.max_episode_steps is None:
            truncated = torch.zeros(n, dtype=torch.bool)
        else:
            truncated = (length >= env.max_episode_steps) & ~terminated
        done = terminated | truncated
        expected_final = _stack_values(final_obs, torch.float64, (n, *env.obs_shape))
        compare(_CHECK, "reward", result.reward, expected_reward, step=step, context=describe, **tol)
        compare(_CHECK, "terminated", result.terminated, terminated, step=step, context=describe, **tol)
        compare(_CHECK, "truncated", result.truncated, truncated, step=step, context=describe, **tol)
        compare(_CHECK, "final_obs", result.final_obs, expected_final, step=step, context=describe, **tol)
        compare(_CHECK, "episode_length", result.episode_length, length, step=step, rows=done, **tol)
        compare(_CHECK, "episode_return", result.episode_return, paid, step=step, rows=done, **tol)

        if bool(done.any()):
            if not env.autoreset:
                result = env.reset_rows(done.to(env.device))
            rows = done.nonzero().flatten().tolist()
            _sync_references(refs, env, to_reference, rows)
            episodes += len(rows)
            length[done] = 0
            paid[done] = 0.0
        _compare_next(env, result, refs, step=step, context=describe, **tol)
    return CheckReport(_CHECK, num_steps, num_steps * n, episodes)


def _stack_values(values: Sequence[Any], dtype: torch.dtype, shape: tuple[int, ...]) -> Tensor:
    """Stack per-row reference outputs (numbers, lists, NumPy arrays) into one tensor of ``shape``."""
    rows = [torch.as_tensor(v).to(dtype) for v in values]
    shapes = {tuple(r.shape) for r in rows}
    if len(shapes) != 1 or len(rows) * rows[0].numel() != torch.Size(shape).numel():
        raise ParityError(
            _CHECK,
            "the reference returned values of the wrong shape",
            field="reference output",
            expected=tuple(shape),
            got=sorted(shapes),
        )
    return torch.stack(rows).reshape(shape)


def _row_repr(row: tuple) -> str:
    names = getattr(row, "_fields", range(len(row)))
    return "(" + ", ".join(f"{n}={t.tolist()}" for n, t in zip(names, row)) + ")"


def _sync_references(
    refs: Sequence[ScalarReference], env: TensorEnv, to_reference: Callable[[tuple], Any], rows: Sequence[int]
) -> None:
    inner = tree_map(lambda t: t.detach().cpu(), env.state.inner)
    for i in rows:
        refs[i].set_state(to_reference(inner_row(inner, i)))


def _compare_next(
    env: TensorEnv,
    result: StepResult,
    refs: Sequence[ScalarReference],
    *,
    step: int,
    context: Callable[[int], str],
    **tol: Any,
) -> None:
    """``obs``, ``action_mask`` (discrete actions) and ``current_player`` of the state the next action is
    chosen in."""
    n = env.num_envs
    obs = _stack_values([ref.observation() for ref in refs], torch.float64, (n, *env.obs_shape))
    compare(_CHECK, "obs", result.obs, obs, step=step, context=context, **tol)
    if not env.is_continuous:
        legal = _stack_values([ref.legal_actions() for ref in refs], torch.bool, (n, env.num_actions))
        compare(_CHECK, "action_mask", result.action_mask, legal, step=step, context=context, **tol)
    player = torch.tensor([int(getattr(ref, "current_player", 0)) for ref in refs], dtype=torch.long)
    compare(_CHECK, "current_player", result.current_player, player, step=step, context=context, **tol)
