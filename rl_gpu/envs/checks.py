"""Checks that a tensor environment keeps the :class:`~rl_gpu.envs.base.TensorEnv` contract, and a harness
that compares it, transition by transition, with a plain-Python reference implementation.

A vectorised environment can look right and still be wrong in a few rows: a finished row that keeps moving,
a reset that touches the wrong rows, a reward paid twice, a transition that depends on the batch size.
These functions drive an environment with reproducible random legal actions and raise
:class:`EnvCheckError` (an ``AssertionError``, so they read naturally in pytest) at the first violation,
naming the check, the env row, the step, the field, and the expected and actual values. Every result
is also checked against the contract's shapes, dtypes and device, with finite ``obs``/``final_obs``/
``reward``, never ``terminated & truncated``, and ``final_obs == obs`` in rows that did not finish.

Generic checks need only an *env factory*, a callable ``factory(num_envs, *, seed, autoreset)`` returning
a :class:`TensorEnv` (every ``TensorEnv`` subclass is one; use ``functools.partial`` to fix a device or
other arguments):

- :func:`check_env` runs all of the following,
- :func:`check_action_masks`: masks are never all False, legal actions are accepted, illegal, out-of-range
  and malformed ones are rejected without changing anything,
- :func:`check_determinism`: same seed and same actions give the same trajectory; a saved state replays,
- :func:`check_batch_vs_single`: row ``i`` of a batch behaves exactly like a batch of one,
- :func:`check_autoreset`: only finished rows reset, ``final_obs`` is the pre-reset observation, episode
  statistics are right,
- :func:`check_frozen_rows`: without auto-reset, finished rows never move and are never paid again, and
  :meth:`~rl_gpu.envs.base.TensorEnv.reset_rows` resets exactly the rows asked.

:func:`check_reference_parity` compares an environment with N copies of a scalar reference (anything that
follows :class:`ScalarReference`), injecting identical states and playing identical actions.

Example::

    from rl_gpu.envs import RussianRouletteVectorized
    from rl_gpu.envs.checks import check_env, check_reference_parity
    from rl_gpu.envs.reference import RouletteGame

    check_env(RussianRouletteVectorized)

    env = RussianRouletteVectorized(512, seed=0)
    report = check_reference_parity(
        env,
        reference_factory=lambda: RouletteGame(live=0),
        to_reference=RouletteGame.from_row,
        to_inner=RouletteGame.as_row,
        num_steps=50,
    )
    print(report.episodes, "games matched the reference")

A reference can wrap an existing single environment, e.g. Gymnasium's CartPole (float64 physics against
float32 tensors, so each transition is compared from the same state)::

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

Random actions come from a CPU ``torch.Generator`` seeded by ``seed``, so a failure reproduces on any
device. The checks read values back to the host on every step: they are tests, not training code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from rl_gpu.envs.base import EnvState, StepResult, TensorEnv

__all__ = [
    "CheckReport",
    "EnvCheckError",
    "EnvFactory",
    "ParityError",
    "ScalarReference",
    "check_action_masks",
    "check_autoreset",
    "check_batch_vs_single",
    "check_determinism",
    "check_env",
    "check_frozen_rows",
    "check_reference_parity",
    "inner_row",
    "sample_actions",
    "stack_rows",
]


class EnvFactory(Protocol):
    """Builds a fresh environment; every :class:`TensorEnv` subclass is one."""

    def __call__(self, num_envs: int, *, seed: int | None, autoreset: bool) -> TensorEnv: ...


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


class EnvCheckError(AssertionError):
    """A check found an environment breaking its contract.

    Attributes:
        check: the check that failed, e.g. ``"check_autoreset"``.
        field: what differed, e.g. ``"reward"``, ``"final_obs"``, ``"state.chamber"``.
        row: the env row (None when the failure is not about one row).
        step: the batched step, counted from 1 (0 = before the first step).
        expected: the expected value in that row.
        got: the actual value in that row.
    """

    def __init__(
        self,
        check: str,
        message: str,
        *,
        field: str | None = None,
        row: int | None = None,
        step: int | None = None,
        expected: Any = None,
        got: Any = None,
        context: str = "",
    ) -> None:
        where = []
        if row is not None:
            where.append(f"env row {row}")
        if step is not None:
            where.append(f"step {step}")
        text = f"[{check}] {message}"
        if where:
            text += f" ({', '.join(where)})"
        if field is not None and (expected is not None or got is not None):
            text += f"\n  expected: {expected}\n  got:      {got}"
        if context:
            text += f"\n  {context}"
        super().__init__(text)
        self.check = check
        self.field = field
        self.row = row
        self.step = step
        self.expected = expected
        self.got = got


class ParityError(EnvCheckError):
    """The tensor environment and the scalar reference disagree (raised by :func:`check_reference_parity`)."""


@dataclass(frozen=True)
class CheckReport:
    """What a passing check covered, so a test can assert that it covered enough.

    Attributes:
        check: the check's name.
        steps: batched steps taken.
        transitions: row transitions compared (rows that were not frozen).
        episodes: episodes that finished (terminated or truncated) during the check.
        details: check-specific counts, e.g. ``{"illegal_rejected": 120}``.
    """

    check: str
    steps: int
    transitions: int
    episodes: int
    details: dict[str, int] = field(default_factory=dict)


def sample_actions(env: TensorEnv, action_mask: Tensor, generator: torch.Generator) -> Tensor:
    """Draw one random action per row, uniformly among the legal ones.

    Args:
        env: the environment the actions are for (gives N, the action space and the device).
        action_mask: ``[N, A]`` bool legality mask (ignored for continuous actions). A row with no legal
            action draws uniformly among all actions.
        generator: a CPU ``torch.Generator``; the same generator state gives the same actions on every
            device.

    Returns:
        ``[N]`` int64 actions, or ``[N, D]`` float32 actions uniform in ``[action_low, action_high]``
        (standard normal in a dimension with an infinite bound), on ``env.device``.
    """
    n = env.num_envs
    if env.is_continuous:
        low = torch.tensor(env.action_low, dtype=torch.float64)
        high = torch.tensor(env.action_high, dtype=torch.float64)
        uniform = torch.rand((n, *env.action_shape), generator=generator, dtype=torch.float64)
        normal = torch.randn((n, *env.action_shape), generator=generator, dtype=torch.float64)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        span = torch.where(bounded, high - low, torch.zeros_like(low))
        base = torch.where(bounded, low, torch.zeros_like(low))
        action = torch.where(bounded, base + uniform * span, normal)
        return action.to(device=env.device, dtype=torch.float32)
    mask = action_mask.detach().to(device="cpu", dtype=torch.bool)
    probs = mask.float()
    probs[~mask.any(1)] = 1.0
    return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(env.device)


def inner_row(inner: tuple, index: int) -> tuple:
    """Row ``index`` of an inner state: the same NamedTuple type, each field indexed (``[N]`` fields become
    0-d tensors, ``[N, k]`` fields ``[k]`` tensors)."""
    return _tree_map(lambda t: t[index], inner)


def stack_rows(template: tuple, rows: Sequence[Any]) -> tuple:
    """Build an inner state of ``len(rows)`` environments from single rows.

    Args:
        template: an inner state of the target environment (e.g. ``env.state.inner``); gives the
            NamedTuple type, per-row shapes, dtypes and the device.
        rows: one entry per environment: the inner NamedTuple, a tuple in field order, or a mapping from
            field name to value; values are anything ``torch.as_tensor`` accepts.

    Returns:
        A NamedTuple of the template's type with ``[len(rows), ...]`` fields, ready for
        :meth:`TensorEnv.set_rows`.

    Raises:
        ValueError: a row misses a field or has a value of the wrong shape.
    """
    names = template._fields
    columns: list[list[Tensor]] = [[] for _ in names]
    for r, row in enumerate(rows):
        if isinstance(row, Mapping):
            missing = [n for n in names if n not in row]
            if missing:
                raise ValueError(f"row {r} misses fields {missing}")
            values = [row[n] for n in names]
        else:
            values = list(row)
            if len(values) != len(names):
                raise ValueError(f"row {r} has {len(values)} fields, expected {len(names)} {names}")
        for column, name, value, ref in zip(columns, names, values, template):
            t = torch.as_tensor(value).to(dtype=ref.dtype, device=ref.device)
            if tuple(t.shape) != tuple(ref.shape[1:]):
                raise ValueError(
                    f"row {r}, field {name!r}: expected shape {tuple(ref.shape[1:])}, got {tuple(t.shape)}"
                )
            column.append(t)
    return type(template)(*(torch.stack(c) for c in columns))


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
    states. Floats are compared with ``atol``/``rtol``, integers and bools exactly.

    Args:
        env: the environment under test (its current configuration, e.g. ``autoreset``, is used).
        reference_factory: builds one reference; its initial state does not matter, it is always set.
        to_reference: maps one row of the environment's inner state (see :func:`inner_row`; CPU tensors)
            to a state the reference's ``set_state`` accepts.
        to_inner: maps a reference state to one row of the inner state (any form :func:`stack_rows`
            accepts). Needed only with ``initial_states``.
        initial_states: N reference states to start from, injected into the environment with
            :meth:`TensorEnv.set_rows` (through ``to_inner``) and into the references with ``set_state``.
            Default: ``env.reset()`` and references synchronised from it.
        num_steps: batched steps to play.
        seed: seeds the action generator.
        atol: absolute tolerance for float fields.
        rtol: relative tolerance for float fields.
        resync_every_step: set every reference from the environment's state before each step, so that
            each transition is compared on its own (useful when float error would otherwise accumulate,
            e.g. float32 physics against a float64 reference).
        action_fn: ``action_fn(result, generator) -> actions`` chooses the actions instead of uniform
            random legal ones (e.g. a fixed action per row, or a policy).

    Returns:
        A :class:`CheckReport`; ``episodes`` counts the episodes that finished.

    Raises:
        ParityError: at the first disagreement, with the row, step, field, the action and the environment
            row's state before the step.
        ValueError: ``initial_states`` has the wrong length or ``to_inner`` is missing.
    """
    check = "check_reference_parity"
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
    prestate = _cpu(env.state.inner)
    _compare_next(check, env, result, refs, step=0, context=context(prestate, None), **tol)

    length = torch.zeros(n, dtype=torch.long)
    paid = torch.zeros(env.reward_shape, dtype=torch.float64)
    episodes = 0
    for step in range(1, num_steps + 1):
        if resync_every_step:
            _sync_references(refs, env, to_reference, range(n))
        prestate = _cpu(env.state.inner)
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
                    check,
                    f"the reference refused action {a} that the environment offered as legal: {exc}",
                    row=i,
                    step=step,
                    context=describe(i),
                ) from exc
            rewards.append(reward)
            terminals.append(bool(terminated))
            final_obs.append(ref.observation())
        result = env.step(action)
        _check_spec(check, env, result, step)

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
        _compare(check, "reward", result.reward, expected_reward, step=step, context=describe, **tol)
        _compare(check, "terminated", result.terminated, terminated, step=step, context=describe, **tol)
        _compare(check, "truncated", result.truncated, truncated, step=step, context=describe, **tol)
        _compare(check, "final_obs", result.final_obs, expected_final, step=step, context=describe, **tol)
        _compare(check, "episode_length", result.episode_length, length, step=step, rows=done, **tol)
        _compare(check, "episode_return", result.episode_return, paid, step=step, rows=done, **tol)

        if bool(done.any()):
            if not env.autoreset:
                result = env.reset_rows(done.to(env.device))
            rows = done.nonzero().flatten().tolist()
            _sync_references(refs, env, to_reference, rows)
            episodes += len(rows)
            length[done] = 0
            paid[done] = 0.0
        _compare_next(check, env, result, refs, step=step, context=describe, **tol)
    return CheckReport(check, num_steps, num_steps * n, episodes)


def check_batch_vs_single(
    env_factory: EnvFactory,
    *,
    num_envs: int = 8,
    num_steps: int = 64,
    seed: int = 0,
    autoreset: bool = True,
    reset_every: int = 10,
    atol: float = 0.0,
    rtol: float = 0.0,
) -> CheckReport:
    """Check that row ``i`` of a batch of ``num_envs`` behaves exactly like a batch of one.

    Each single environment starts from the batch's row ``i`` (injected with ``set_rows``) and gets the
    batch's action for that row. Every result field and the full state are compared each step. A fresh
    start comes from a different generator in the two environments, so after a reset the single
    environment is re-synchronised from the batch row: with auto-reset, after comparing the transition;
    without, finished rows stay frozen for a while and every ``reset_every`` steps the batch resets them
    with ``reset_rows``.

    Args:
        env_factory: builds the environments.
        num_envs: batch size N.
        num_steps: batched steps to play.
        seed: seeds the batch and the action generator.
        autoreset: the auto-reset mode of every environment.
        reset_every: without auto-reset, steps between resets of the finished rows.
        atol: absolute tolerance for float fields (exact by default: row ``i`` must not depend on N).
        rtol: relative tolerance for float fields.

    Returns:
        A :class:`CheckReport`.

    Raises:
        EnvCheckError: at the first difference.
    """
    check = "check_batch_vs_single"
    tol = {"atol": atol, "rtol": rtol}
    batch = env_factory(num_envs, seed=seed, autoreset=autoreset)
    singles = [env_factory(1, seed=seed + 1 + i, autoreset=autoreset) for i in range(num_envs)]
    generator = torch.Generator().manual_seed(seed)
    result = batch.reset()
    for i in range(num_envs):
        _sync_single(singles[i], batch, i)
    _compare_results(check, _cat([s.observe() for s in singles]), result, step=0, **tol)
    _compare_tree(check, "state", _cat([s.state for s in singles]), batch.state, step=0, **tol)

    episodes = transitions = 0
    for step in range(1, num_steps + 1):
        active = ~batch.state.done.cpu()
        action = sample_actions(batch, result.action_mask, generator)
        result = batch.step(action)
        single = _cat([s.step(action[i : i + 1]) for i, s in enumerate(singles)])
        _check_spec(check, batch, result, step)
        done = result.done.cpu()
        # With auto-reset each side drew its own fresh start: compare the transition, then copy the batch's.
        reset_here = done if autoreset else torch.zeros_like(done)
        _compare_results(check, single, result, step=step, after_reset_rows=~reset_here, **tol)
        if bool(reset_here.any()):
            for i in reset_here.nonzero().flatten().tolist():
                _sync_single(singles[i], batch, i)
            resynced = _cat([s.observe() for s in singles])
            for name in _AFTER_RESET_FIELDS:
                _compare(
                    check, name, getattr(resynced, name), getattr(result, name), step=step, rows=done, **tol
                )
        _compare_tree(check, "state", _cat([s.state for s in singles]), batch.state, step=step, **tol)
        episodes += int(done.sum())
        transitions += int(active.sum())
        if not autoreset and step % reset_every == 0:
            finished = batch.state.done
            result = batch.reset_rows(finished)
            for i in finished.cpu().nonzero().flatten().tolist():
                _sync_single(singles[i], batch, i)
            _compare_results(check, _cat([s.observe() for s in singles]), result, step=step, **tol)
            _compare_tree(check, "state", _cat([s.state for s in singles]), batch.state, step=step, **tol)
    return CheckReport(check, num_steps, transitions, episodes)


def check_autoreset(
    env_factory: EnvFactory,
    *,
    num_envs: int = 16,
    num_steps: int = 100,
    seed: int = 0,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> CheckReport:
    """Check same-step auto-reset against a twin without auto-reset stepped from the same state.

    Before every step the twin (``autoreset=False``) is given the auto-reset environment's state; both take
    the same actions. Then:

    - transition flags and rewards agree, and ``final_obs`` is the twin's (pre-reset) observation,
    - rows that did not finish match the twin exactly (result fields, inner state, counters),
    - rows that finished hold exactly the fresh start the environment's generator drew for this step
      (reproduced from the generator's state, assuming, as :meth:`TensorEnv.step` does, one
      ``_sample_initial_state`` draw per step), with zeroed counters, and ``obs``/``action_mask``/
      ``current_player`` describe that fresh start,
    - ``episode_length`` and ``episode_return`` (``atol``/``rtol``: sums of float32 rewards) of finished
      episodes match the steps and rewards counted here.

    Args:
        env_factory: builds the environments.
        num_envs: batch size N.
        num_steps: batched steps to play.
        seed: seeds the environments and the action generator.
        atol: absolute tolerance for ``episode_return``.
        rtol: relative tolerance for ``episode_return``.

    Returns:
        A :class:`CheckReport`.

    Raises:
        EnvCheckError: at the first violation.
    """
    check = "check_autoreset"
    env = env_factory(num_envs, seed=seed, autoreset=True)
    twin = env_factory(num_envs, seed=seed + 1, autoreset=False)
    fresh = env_factory(num_envs, seed=seed + 2, autoreset=True)
    generator = torch.Generator().manual_seed(seed)
    result = env.reset()
    length = torch.zeros(num_envs, dtype=torch.long)
    paid = torch.zeros(env.reward_shape, dtype=torch.float64)
    episodes = 0
    for step in range(1, num_steps + 1):
        twin.set_state(env.get_state())
        reset_draw = env.generator.get_state()
        action = sample_actions(env, result.action_mask, generator)
        result = env.step(action)
        expected = twin.step(action)
        _check_spec(check, env, result, step)
        fresh.generator.set_state(reset_draw)
        fresh.reset()
        done = result.done.cpu()
        state = env.state

        _compare_results(check, result, expected, step=step, after_reset_rows=~done)
        _compare(check, "final_obs", result.final_obs, expected.obs, step=step)
        _compare_tree(check, "state.inner", state.inner, twin.state.inner, step=step, rows=~done)
        _compare(
            check, "state.episode_step", state.episode_step, twin.state.episode_step, step=step, rows=~done
        )
        _compare(
            check,
            "state.episode_return",
            state.episode_return,
            twin.state.episode_return,
            step=step,
            rows=~done,
        )
        _compare(check, "state.done", state.done, torch.zeros(num_envs, dtype=torch.bool), step=step)
        _compare_restarted(check, "reset", state, fresh.state, env, step=step, rows=done)
        now = env.observe()
        for name in ("obs", "action_mask", "current_player"):
            _compare(check, name, getattr(result, name), getattr(now, name), step=step)

        length += 1
        paid += result.reward.detach().cpu().double()
        _compare(check, "episode_length", result.episode_length, length, step=step, rows=done)
        _compare(
            check, "episode_return", result.episode_return, paid, step=step, rows=done, atol=atol, rtol=rtol
        )
        length[done] = 0
        paid[done] = 0.0
        episodes += int(done.sum())
    return CheckReport(check, num_steps, num_steps * num_envs, episodes)


def check_frozen_rows(
    env_factory: EnvFactory,
    *,
    num_envs: int = 16,
    num_steps: int = 100,
    seed: int = 0,
    reset_every: int | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> CheckReport:
    """Check an ``autoreset=False`` environment: finished rows stay frozen until ``reset_rows`` resets them.

    Frozen rows are fed random in-range actions, legal or not (they must be ignored). Each step checks
    that a frozen row's inner state, counters and observation do not change and that it gets zero reward
    and False flags, that a row finishes at most once per episode, and that ``episode_return`` at the
    finish equals every reward paid in that episode. Every ``reset_every`` steps, a random subset of rows
    (frozen or not) is reset with :meth:`TensorEnv.reset_rows`: exactly those rows get the fresh start the
    generator drew and zeroed counters; the others are untouched.

    Args:
        env_factory: builds the environments.
        num_envs: batch size N.
        num_steps: batched steps to play.
        seed: seeds the environments, the actions and the reset subsets.
        reset_every: steps between partial resets (default ``max(1, num_steps // 4)``).
        atol: absolute tolerance for ``episode_return``.
        rtol: relative tolerance for ``episode_return``.

    Returns:
        A :class:`CheckReport`; ``details["frozen_steps"]`` counts frozen row-steps checked and
        ``details["rows_reset"]`` the rows reset by ``reset_rows``.

    Raises:
        EnvCheckError: at the first violation.
    """
    check = "check_frozen_rows"
    env = env_factory(num_envs, seed=seed, autoreset=False)
    fresh = env_factory(num_envs, seed=seed + 1, autoreset=False)
    generator = torch.Generator().manual_seed(seed)
    reset_every = max(1, num_steps // 4) if reset_every is None else reset_every
    result = env.reset()
    zero_reward = torch.zeros(env.reward_shape)
    no = torch.zeros(num_envs, dtype=torch.bool)
    length = torch.zeros(num_envs, dtype=torch.long)
    paid = torch.zeros(env.reward_shape, dtype=torch.float64)
    episodes = transitions = frozen_steps = rows_reset = 0
    for step in range(1, num_steps + 1):
        before = env.get_state()
        previous = _cpu(result)
        frozen = before.done.cpu()
        mask = result.action_mask.cpu() | frozen.unsqueeze(1)
        action = sample_actions(env, mask, generator)
        try:
            result = env.step(action)
        except ValueError as exc:
            raise EnvCheckError(check, f"a step with frozen rows raised: {exc}", step=step) from exc
        _check_spec(check, env, result, step)
        after = env.state
        _compare_tree(check, "frozen state", after, before, step=step, rows=frozen)
        _compare(check, "frozen reward", result.reward, zero_reward, step=step, rows=frozen)
        _compare(check, "frozen terminated", result.terminated, no, step=step, rows=frozen)
        _compare(check, "frozen truncated", result.truncated, no, step=step, rows=frozen)
        for name in _AFTER_RESET_FIELDS:
            _compare(
                check,
                f"frozen {name}",
                getattr(result, name),
                getattr(previous, name),
                step=step,
                rows=frozen,
            )
        _compare(check, "frozen final_obs", result.final_obs, previous.obs, step=step, rows=frozen)
        done = result.done.cpu()
        _compare(check, "state.done", after.done, frozen | done, step=step)
        length += (~frozen).long()
        paid += result.reward.detach().cpu().double()
        _compare(check, "episode_length", result.episode_length, length, step=step, rows=done)
        _compare(
            check, "episode_return", result.episode_return, paid, step=step, rows=done, atol=atol, rtol=rtol
        )
        episodes += int(done.sum())
        transitions += int((~frozen).sum())
        frozen_steps += int(frozen.sum())

        if step % reset_every == 0:
            rows = torch.rand(num_envs, generator=generator) < 0.5
            before = env.get_state()
            reset_draw = env.generator.get_state()
            result = env.reset_rows(rows.to(env.device))
            fresh.generator.set_state(reset_draw)
            fresh.reset()
            after = env.state
            _compare_restarted(check, "reset_rows", after, fresh.state, env, step=step, rows=rows)
            _compare(check, "reset_rows state.done", after.done, no, step=step, rows=rows)
            _compare_tree(check, "untouched state", after, before, step=step, rows=~rows)
            _compare_results(check, result, env.observe(), step=step)
            _compare(check, "reset_rows reward", result.reward, zero_reward, step=step)
            length[rows] = 0
            paid[rows] = 0.0
            rows_reset += int(rows.sum())
    return CheckReport(
        check, num_steps, transitions, episodes, {"frozen_steps": frozen_steps, "rows_reset": rows_reset}
    )


def check_determinism(
    env_factory: EnvFactory,
    seed: int = 0,
    *,
    num_envs: int = 16,
    num_steps: int = 100,
) -> CheckReport:
    """Check that the same seed and the same actions give the same trajectory, bit for bit.

    Three things are compared exactly: two environments built with ``seed``; an environment built with
    another seed then ``reset(seed=seed)``, stepped in lockstep with the first; and a replay of the second
    half of the trajectory after restoring the state saved with ``get_state`` (and the generators' states)
    at the midpoint.

    Args:
        env_factory: builds the environments (with auto-reset on).
        seed: the seed under test.
        num_envs: batch size N.
        num_steps: batched steps to play.

    Returns:
        A :class:`CheckReport`.

    Raises:
        EnvCheckError: at the first difference.
    """
    check = "check_determinism"
    a = env_factory(num_envs, seed=seed, autoreset=True)
    b = env_factory(num_envs, seed=seed, autoreset=True)
    _compare_tree(check, "state after construction", b.state, a.state, step=0)
    c = env_factory(num_envs, seed=seed + 1, autoreset=True)
    result_a = a.reset(seed=seed)
    result_c = c.reset(seed=seed)
    _compare_results(check, result_c, result_a, step=0)
    gen_a = torch.Generator().manual_seed(seed)
    gen_c = torch.Generator().manual_seed(seed)
    middle = num_steps // 2
    recorded: list[StepResult] = []
    snapshot = None
    episodes = 0
    for step in range(1, num_steps + 1):
        if step == middle + 1:
            snapshot = (a.get_state(), a.generator.get_state(), gen_a.get_state(), result_a)
        action_a = sample_actions(a, result_a.action_mask, gen_a)
        action_c = sample_actions(c, result_c.action_mask, gen_c)
        _compare(check, "action", action_c, action_a, step=step)
        result_a = a.step(action_a)
        result_c = c.step(action_c)
        _check_spec(check, a, result_a, step)
        _compare_results(check, result_c, result_a, step=step)
        _compare_tree(check, "state", c.state, a.state, step=step)
        if step > middle:
            recorded.append(_cpu(result_a))
        episodes += int(result_a.done.sum())
    if snapshot is not None:
        state, env_draws, action_draws, result_a = snapshot
        a.set_state(state)
        a.generator.set_state(env_draws)
        gen_a.set_state(action_draws)
        for step, expected in enumerate(recorded, start=middle + 1):
            result_a = a.step(sample_actions(a, result_a.action_mask, gen_a))
            _compare_results(check, result_a, expected, step=step, label="replay ")
    return CheckReport(check, num_steps, num_steps * num_envs, episodes)


def check_action_masks(
    env_factory: EnvFactory,
    *,
    num_envs: int = 16,
    num_steps: int = 100,
    seed: int = 0,
) -> CheckReport:
    """Check action masks and action validation (``validate_actions=True``).

    Every step: each row's mask has a legal action; an action sampled among legal ones is accepted; if
    some row has an illegal action, a step with that action in that row raises ``ValueError``. Before the
    first step, out-of-range values, a wrong shape, a wrong dtype and a non-tensor are refused (for
    continuous actions: a wrong shape, an integer dtype and NaN). A refused action must change nothing:
    state and generator are compared before and after.

    Args:
        env_factory: builds the environment (``validate_actions`` is switched on).
        num_envs: batch size N.
        num_steps: batched steps to play.
        seed: seeds the environment and the action generator.

    Returns:
        A :class:`CheckReport`; ``details["illegal_rejected"]`` counts illegal actions refused.

    Raises:
        EnvCheckError: at the first violation.
    """
    check = "check_action_masks"
    env = env_factory(num_envs, seed=seed, autoreset=True)
    env.validate_actions = True
    generator = torch.Generator().manual_seed(seed)
    result = env.reset()
    _check_spec(check, env, result, 0)
    legal = sample_actions(env, result.action_mask, generator)
    for description, bad, errors in _malformed_actions(env, legal):
        _expect_refusal(check, env, bad, errors, description, step=0)
    rejected = episodes = 0
    for step in range(1, num_steps + 1):
        mask = result.action_mask.cpu()
        if not env.is_continuous:
            empty = ~mask.any(1)
            if bool(empty.any()):
                row = int(empty.long().argmax())
                raise EnvCheckError(
                    check,
                    "no legal action in the mask",
                    field="action_mask",
                    row=row,
                    step=step,
                    got=mask[row].tolist(),
                )
        action = sample_actions(env, result.action_mask, generator)
        if not env.is_continuous and bool((~mask).any()):
            row = int((~mask).any(1).long().argmax())
            bad = action.clone()
            bad[row] = int((~mask[row]).long().argmax())
            _expect_refusal(
                check, env, bad, (ValueError,), f"illegal action {int(bad[row])} in row {row}", step
            )
            rejected += 1
        try:
            result = env.step(action)
        except (ValueError, TypeError) as exc:
            raise EnvCheckError(check, f"a legal action was refused: {exc}", step=step) from exc
        _check_spec(check, env, result, step)
        episodes += int(result.done.sum())
    return CheckReport(check, num_steps, num_steps * num_envs, episodes, {"illegal_rejected": rejected})


def check_env(
    env_factory: EnvFactory,
    *,
    num_envs: int = 16,
    num_steps: int = 100,
    seed: int = 0,
) -> dict[str, CheckReport]:
    """Run every generic check (no reference needed): action masks, determinism, batch-vs-single (with
    and without auto-reset, at most 8 rows), auto-reset and frozen rows.

    Episodes must finish for the reset paths to be exercised: choose ``num_steps`` above the typical
    episode length (at least ``max_episode_steps`` for an environment that only truncates) and look at
    the reports' ``episodes``.

    Args:
        env_factory: builds the environments; e.g. the environment class itself, or
            ``functools.partial(MyEnv, device="cuda")``.
        num_envs: batch size N of each check.
        num_steps: batched steps of each check.
        seed: base seed.

    Returns:
        The :class:`CheckReport` of each check, keyed ``"action_masks"``, ``"determinism"``,
        ``"batch_vs_single"``, ``"batch_vs_single_no_autoreset"``, ``"autoreset"``, ``"frozen_rows"``.

    Raises:
        EnvCheckError: at the first violation.
    """
    small = min(num_envs, 8)
    common = {"num_steps": num_steps, "seed": seed}
    return {
        "action_masks": check_action_masks(env_factory, num_envs=num_envs, **common),
        "determinism": check_determinism(env_factory, seed, num_envs=num_envs, num_steps=num_steps),
        "batch_vs_single": check_batch_vs_single(env_factory, num_envs=small, autoreset=True, **common),
        "batch_vs_single_no_autoreset": check_batch_vs_single(
            env_factory, num_envs=small, autoreset=False, **common
        ),
        "autoreset": check_autoreset(env_factory, num_envs=num_envs, **common),
        "frozen_rows": check_frozen_rows(env_factory, num_envs=num_envs, **common),
    }


def _tree_map(fn: Callable[[Tensor], Any], tree: tuple) -> tuple:
    mapped = [fn(t) for t in tree]
    return type(tree)(*mapped) if hasattr(tree, "_fields") else tuple(mapped)


def _cpu(tree: tuple) -> tuple:
    return _tree_map(lambda t: t.detach().cpu(), tree)


def _cat(trees: Sequence[tuple]) -> tuple:
    """Concatenate NamedTuples (possibly nested one level, as EnvState) along the batch dimension."""
    first = trees[0]
    fields = []
    for i, item in enumerate(first):
        if isinstance(item, Tensor):
            fields.append(torch.cat([t[i].detach().cpu() for t in trees]))
        else:
            fields.append(_cat([t[i] for t in trees]))
    return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)


def _stack_values(values: Sequence[Any], dtype: torch.dtype, shape: tuple[int, ...]) -> Tensor:
    """Stack per-row reference outputs (numbers, lists, NumPy arrays) into one tensor of ``shape``."""
    rows = [torch.as_tensor(v).to(dtype) for v in values]
    shapes = {tuple(r.shape) for r in rows}
    if len(shapes) != 1 or len(rows) * rows[0].numel() != torch.Size(shape).numel():
        raise ParityError(
            "check_reference_parity",
            "the reference returned values of the wrong shape",
            field="reference output",
            expected=tuple(shape),
            got=sorted(shapes),
        )
    return torch.stack(rows).reshape(shape)


def _row_repr(row: tuple) -> str:
    names = getattr(row, "_fields", range(len(row)))
    return "(" + ", ".join(f"{n}={t.tolist()}" for n, t in zip(names, row)) + ")"


def _sync_single(single: TensorEnv, batch: TensorEnv, row: int) -> None:
    inner = _tree_map(lambda t: t[row : row + 1], batch.state.inner)
    single.set_rows(torch.tensor([0]), inner)


def _sync_references(
    refs: Sequence[ScalarReference], env: TensorEnv, to_reference: Callable[[tuple], Any], rows: Sequence[int]
) -> None:
    inner = _cpu(env.state.inner)
    for i in rows:
        refs[i].set_state(to_reference(inner_row(inner, i)))


def _compare(
    check: str,
    name: str,
    got: Tensor,
    expected: Tensor,
    *,
    step: int,
    rows: Tensor | None = None,
    atol: float = 0.0,
    rtol: float = 0.0,
    error: type[EnvCheckError] = EnvCheckError,
    context: Callable[[int], str] | None = None,
) -> None:
    """Raise at the first row where ``got`` differs from ``expected`` (restricted to ``rows``)."""
    got = torch.as_tensor(got).detach().cpu()
    expected = torch.as_tensor(expected).detach().cpu()
    if got.shape != expected.shape:
        raise error(
            check,
            f"{name} has the wrong shape",
            field=name,
            step=step,
            expected=tuple(expected.shape),
            got=tuple(got.shape),
        )
    if got.is_floating_point() or expected.is_floating_point():
        g, e = got.double(), expected.double()
        bad = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    else:
        bad = got != expected
    if bad.dim() > 1:
        bad = bad.flatten(1).any(1)
    elif bad.dim() == 0:
        bad = bad.reshape(1)
    if rows is not None:
        bad = bad & rows.detach().cpu()
    if bool(bad.any()):
        row = int(bad.long().argmax())
        raise error(
            check,
            f"{name} mismatch",
            field=name,
            row=row,
            step=step,
            expected=expected[row].tolist() if expected.dim() else expected.item(),
            got=got[row].tolist() if got.dim() else got.item(),
            context=context(row) if context is not None else "",
        )


def _compare_tree(
    check: str, name: str, got: tuple, expected: tuple, *, step: int, rows: Tensor | None = None, **tol: Any
) -> None:
    names = getattr(expected, "_fields", [str(i) for i in range(len(expected))])
    if len(got) != len(expected):
        raise EnvCheckError(check, f"{name} has {len(got)} fields, expected {len(expected)}", step=step)
    for field_name, g, e in zip(names, got, expected):
        if isinstance(e, Tensor):
            _compare(check, f"{name}.{field_name}", g, e, step=step, rows=rows, **tol)
        else:
            _compare_tree(check, f"{name}.{field_name}", g, e, step=step, rows=rows, **tol)


_AFTER_RESET_FIELDS = ("obs", "action_mask", "current_player")


def _compare_restarted(
    check: str, label: str, state: EnvState, fresh: EnvState, env: TensorEnv, *, step: int, rows: Tensor
) -> None:
    """``rows`` of ``state`` hold a fresh start (that of ``fresh``) with zeroed episode counters."""
    _compare_tree(check, f"{label} state.inner", state.inner, fresh.inner, step=step, rows=rows)
    _compare(check, f"{label} state.episode_step", state.episode_step,
             torch.zeros(env.num_envs, dtype=torch.long), step=step, rows=rows)
    _compare(check, f"{label} state.episode_return", state.episode_return, torch.zeros(env.reward_shape),
             step=step, rows=rows)


def _compare_results(
    check: str,
    got: StepResult,
    expected: StepResult,
    *,
    step: int,
    after_reset_rows: Tensor | None = None,
    label: str = "",
    **tol: Any,
) -> None:
    """Compare every field; the fields describing the post-reset state only in ``after_reset_rows``."""
    for name in StepResult._fields:
        rows = after_reset_rows if name in _AFTER_RESET_FIELDS else None
        _compare(
            check, label + name, getattr(got, name), getattr(expected, name), step=step, rows=rows, **tol
        )


def _compare_next(
    check: str,
    env: TensorEnv,
    result: StepResult,
    refs: Sequence[ScalarReference],
    *,
    step: int,
    context: Callable[[int], str],
    **tol: Any,
) -> None:
    n = env.num_envs
    obs = _stack_values([ref.observation() for ref in refs], torch.float64, (n, *env.obs_shape))
    _compare(check, "obs", result.obs, obs, step=step, context=context, **tol)
    if not env.is_continuous:
        legal = _stack_values([ref.legal_actions() for ref in refs], torch.bool, (n, env.num_actions))
        _compare(check, "action_mask", result.action_mask, legal, step=step, context=context, **tol)
    player = torch.tensor([int(getattr(ref, "current_player", 0)) for ref in refs], dtype=torch.long)
    _compare(check, "current_player", result.current_player, player, step=step, context=context, **tol)


def _check_spec(check: str, env: TensorEnv, result: StepResult, step: int) -> None:
    """Shapes, dtypes, device and the invariants every StepResult must satisfy."""
    n = env.num_envs
    spec = {
        "obs": ((n, *env.obs_shape), torch.float32),
        "reward": (env.reward_shape, torch.float32),
        "terminated": ((n,), torch.bool),
        "truncated": ((n,), torch.bool),
        "final_obs": ((n, *env.obs_shape), torch.float32),
        "action_mask": ((n, env.num_actions), torch.bool),
        "current_player": ((n,), torch.int64),
        "episode_return": (env.reward_shape, torch.float32),
        "episode_length": ((n,), torch.int64),
    }
    for name, (shape, dtype) in spec.items():
        t = getattr(result, name)
        if not isinstance(t, Tensor) or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            got = (tuple(t.shape), t.dtype) if isinstance(t, Tensor) else type(t).__name__
            raise EnvCheckError(
                check,
                f"{name} has the wrong shape or dtype",
                field=name,
                step=step,
                expected=(tuple(shape), dtype),
                got=got,
            )
        if t.device != env.device:
            raise EnvCheckError(
                check, f"{name} is on {t.device}, the environment on {env.device}", field=name, step=step
            )
    for name in ("obs", "final_obs", "reward"):
        finite = torch.isfinite(getattr(result, name)).cpu()
        _compare(check, f"{name} is finite", finite, torch.ones_like(finite), step=step)
    both = (result.terminated & result.truncated).cpu()
    _compare(check, "terminated & truncated", both, torch.zeros_like(both), step=step)
    player = result.current_player.cpu()
    in_range = (player >= 0) & (player < env.num_players)
    _compare(check, "current_player in range", in_range, torch.ones_like(in_range), step=step)
    _compare(
        check,
        "final_obs of an unfinished row",
        result.final_obs,
        result.obs,
        step=step,
        rows=~result.done.cpu(),
    )


def _malformed_actions(env: TensorEnv, legal: Tensor) -> list[tuple[str, Any, tuple[type[Exception], ...]]]:
    n = env.num_envs
    cases: list[tuple[str, Any, tuple[type[Exception], ...]]] = [
        ("a wrong batch size", legal[:-1] if n > 1 else torch.cat([legal, legal]), (ValueError,)),
        ("a non-tensor action", legal.tolist(), (TypeError, ValueError)),
    ]
    if env.is_continuous:
        nan = legal.clone()
        nan[0, 0] = float("nan")
        cases += [
            ("an integer continuous action", legal.long(), (ValueError,)),
            ("a NaN action", nan, (ValueError,)),
        ]
    else:
        for value in (env.num_actions, -1):
            bad = legal.clone()
            bad[0] = value
            cases.append((f"out-of-range action {value}", bad, (ValueError,)))
        cases += [
            ("a float discrete action", legal.float(), (ValueError,)),
            ("a [N, 1] discrete action", legal.unsqueeze(1), (ValueError,)),
        ]
    return cases


def _expect_refusal(
    check: str,
    env: TensorEnv,
    action: Any,
    errors: tuple[type[Exception], ...],
    description: str,
    step: int,
) -> None:
    before: EnvState = env.get_state()
    draws = env.generator.get_state()
    expected = " or ".join(e.__name__ for e in errors)
    try:
        env.step(action)
    except errors:
        pass
    except Exception as exc:
        raise EnvCheckError(
            check, f"{description} raised {type(exc).__name__} ({exc}); expected {expected}", step=step
        ) from exc
    else:
        raise EnvCheckError(check, f"{description} was accepted; expected {expected}", step=step)
    _compare_tree(check, f"state after refusing {description}", env.state, before, step=step)
    if not torch.equal(env.generator.get_state(), draws):
        raise EnvCheckError(check, f"refusing {description} advanced the environment's generator", step=step)
