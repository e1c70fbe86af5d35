"""Generic checks that a tensor environment keeps the :class:`~rl_gpu.envs.base.TensorEnv` contract, with no
reference implementation needed.

A vectorised environment can look right and still be wrong in a few rows: a finished row that keeps moving,
a reset that touches the wrong rows, a reward paid twice, a transition that depends on the batch size.
These functions drive an environment with reproducible random legal actions and raise
:class:`~rl_gpu.envs.testing.EnvCheckError` at the first violation, naming the check, the env row, the
step, the field, and the expected and actual values. Every step result is also held to the step-result
contract (:func:`~rl_gpu.envs.testing.compare.check_result`).

Each check needs only an *env factory*, a callable ``factory(num_envs, *, seed, autoreset)`` returning a
:class:`TensorEnv` (:class:`~rl_gpu.envs.testing.EnvFactory`):

- :func:`check_env` runs all of the following,
- :func:`check_action_masks`: masks are never all False, legal actions are accepted, illegal, out-of-range
  and malformed ones are rejected without changing anything,
- :func:`check_determinism`: same seed and same actions give the same trajectory; a saved state replays,
- :func:`check_batch_vs_single`: row ``i`` of a batch behaves exactly like a batch of one,
- :func:`~rl_gpu.envs.testing.check_autoreset` and :func:`~rl_gpu.envs.testing.check_frozen_rows`: the
  two reset modes (:mod:`~rl_gpu.envs.testing.resets`).

Example::

    from rl_gpu.envs import RussianRouletteVectorized
    from rl_gpu.envs.testing import check_env

    reports = check_env(RussianRouletteVectorized)
    assert reports["autoreset"].episodes > 0

Random actions come from a CPU ``torch.Generator`` seeded by ``seed``, so a failure reproduces on any
device. The checks read values back to the host on every step: they are tests, not training code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_cat, tree_map
from rl_gpu.envs.base import EnvState, StepResult, TensorEnv
from rl_gpu.envs.params import EnvContractError
from rl_gpu.envs.testing.compare import (
    AFTER_RESET_FIELDS,
    check_result,
    compare,
    compare_results,
    compare_tree,
)
from rl_gpu.envs.testing.drive import EnvFactory, sample_actions
from rl_gpu.envs.testing.preflight import check_run_env
from rl_gpu.envs.testing.report import CheckReport, EnvCheckError
from rl_gpu.envs.testing.resets import check_autoreset, check_frozen_rows

__all__ = ["check_action_masks", "check_batch_vs_single", "check_determinism", "check_env"]


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
        The :class:`~rl_gpu.envs.testing.CheckReport` of each check, keyed ``"action_masks"``,
        ``"determinism"``, ``"batch_vs_single"``, ``"batch_vs_single_no_autoreset"``, ``"autoreset"``,
        ``"frozen_rows"``.

    Raises:
        EnvCheckError: at the first violation.
    """
    small = min(num_envs, 8)
    common = {"num_steps": num_steps, "seed": seed}
    try:  # the outputs' types first, so a wrong one is named where the environment made it (never a torch error)
        check_run_env(env_factory(small, seed=seed, autoreset=True), num_steps=min(num_steps, 16), seed=seed)
    except EnvContractError as e:
        raise EnvCheckError("check_env", str(e)) from None
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
        A :class:`~rl_gpu.envs.testing.CheckReport`.

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
    compare_results(check, tree_cat([s.observe() for s in singles]), result, step=0, **tol)
    compare_tree(check, "state", tree_cat([s.state for s in singles]), batch.state, step=0, **tol)

    episodes = transitions = 0
    for step in range(1, num_steps + 1):
        active = ~batch.state.done.cpu()
        action = sample_actions(batch, result.action_mask, generator)
        result = batch.step(action)
        single = tree_cat([s.step(action[i : i + 1]) for i, s in enumerate(singles)])
        check_result(check, batch, result, step)
        done = result.done.cpu()
        # With auto-reset each side drew its own fresh start: compare the transition, then copy the batch's.
        reset_here = done if autoreset else torch.zeros_like(done)
        compare_results(check, single, result, step=step, after_reset_rows=~reset_here, **tol)
        if bool(reset_here.any()):
            for i in reset_here.nonzero().flatten().tolist():
                _sync_single(singles[i], batch, i)
            resynced = tree_cat([s.observe() for s in singles])
            for name in AFTER_RESET_FIELDS:
                compare(
                    check, name, getattr(resynced, name), getattr(result, name), step=step, rows=done, **tol
                )
        compare_tree(check, "state", tree_cat([s.state for s in singles]), batch.state, step=step, **tol)
        episodes += int(done.sum())
        transitions += int(active.sum())
        if not autoreset and step % reset_every == 0:
            finished = batch.state.done
            result = batch.reset_rows(finished)
            for i in finished.cpu().nonzero().flatten().tolist():
                _sync_single(singles[i], batch, i)
            compare_results(check, tree_cat([s.observe() for s in singles]), result, step=step, **tol)
            compare_tree(check, "state", tree_cat([s.state for s in singles]), batch.state, step=step, **tol)
    return CheckReport(check, num_steps, transitions, episodes)


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
        A :class:`~rl_gpu.envs.testing.CheckReport`.

    Raises:
        EnvCheckError: at the first difference.
    """
    check = "check_determinism"
    a = env_factory(num_envs, seed=seed, autoreset=True)
    b = env_factory(num_envs, seed=seed, autoreset=True)
    compare_tree(check, "state after construction", b.state, a.state, step=0)
    c = env_factory(num_envs, seed=seed + 1, autoreset=True)
    result_a = a.reset(seed=seed)
    result_c = c.reset(seed=seed)
    compare_results(check, result_c, result_a, step=0)
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
        compare(check, "action", action_c, action_a, step=step)
        result_a = a.step(action_a)
        result_c = c.step(action_c)
        check_result(check, a, result_a, step)
        compare_results(check, result_c, result_a, step=step)
        compare_tree(check, "state", c.state, a.state, step=step)
        if step > middle:
            recorded.append(tree_map(lambda t: t.detach().cpu(), result_a))
        episodes += int(result_a.done.sum())
    if snapshot is not None:
        state, env_draws, action_draws, result_a = snapshot
        a.set_state(state)
        a.generator.set_state(env_draws)
        gen_a.set_state(action_draws)
        for step, expected in enumerate(recorded, start=middle + 1):
            result_a = a.step(sample_actions(a, result_a.action_mask, gen_a))
            compare_results(check, result_a, expected, step=step, label="replay ")
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
        A :class:`~rl_gpu.envs.testing.CheckReport`; ``details["illegal_rejected"]`` counts illegal
        actions refused.

    Raises:
        EnvCheckError: at the first violation.
    """
    check = "check_action_masks"
    env = env_factory(num_envs, seed=seed, autoreset=True)
    env.validate_actions = True
    generator = torch.Generator().manual_seed(seed)
    result = env.reset()
    check_result(check, env, result, 0)
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
        check_result(check, env, result, step)
        episodes += int(result.done.sum())
    return CheckReport(check, num_steps, num_steps * num_envs, episodes, {"illegal_rejected": rejected})


def _sync_single(single: TensorEnv, batch: TensorEnv, row: int) -> None:
    """Give the one-row ``single`` the inner state of ``batch``'s row ``row`` (counters restart at zero)."""
    single.set_rows(torch.tensor([0]), tree_map(lambda t: t[row : row + 1], batch.state.inner))


def _malformed_actions(env: TensorEnv, legal: Tensor) -> list[tuple[str, Any, tuple[type[Exception], ...]]]:
    """``(description, action, accepted exception types)`` for each malformed variant of ``legal``."""
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
    """``env.step(action)`` must raise one of ``errors`` and leave the state and the generator as they
    were."""
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
    compare_tree(check, f"state after refusing {description}", env.state, before, step=step)
    if not torch.equal(env.generator.get_state(), draws):
        raise EnvCheckError(check, f"refusing {description} advanced the environment's generator", step=step)
