"""Checks of the two reset modes of a :class:`~rl_gpu.envs.base.TensorEnv`: same-step auto-reset, and frozen
finished rows that only :meth:`~rl_gpu.envs.base.TensorEnv.reset_rows` restarts.

Both compare what the environment did with what it should have done from the same state: a twin without
auto-reset gives the pre-reset transition, and a third environment whose generator is set to the state the
environment's generator had before the step reproduces the fresh starts it drew. Episode statistics are
recounted here: for an episode that finished at step ``t`` after starting at step ``s``,
``episode_length = t - s`` and ``episode_return = sum of the rewards paid in steps s+1..t``.
"""

from __future__ import annotations

import torch

from rl_gpu.core.pytree import tree_map
from rl_gpu.envs.testing.compare import (
    AFTER_RESET_FIELDS,
    check_result,
    compare,
    compare_restarted,
    compare_results,
    compare_tree,
)
from rl_gpu.envs.testing.drive import EnvFactory, sample_actions
from rl_gpu.envs.testing.report import CheckReport, EnvCheckError

__all__ = ["check_autoreset", "check_frozen_rows"]


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
      :meth:`~TensorEnv.draw_starts` per step), with zeroed counters, and ``obs``/``action_mask``/
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
        A :class:`~rl_gpu.envs.testing.CheckReport`.

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
        check_result(check, env, result, step)
        fresh.generator.set_state(reset_draw)
        fresh.reset()
        done = result.done.cpu()
        state = env.state

        compare_results(check, result, expected, step=step, after_reset_rows=~done)
        compare(check, "final_obs", result.final_obs, expected.obs, step=step)
        compare_tree(check, "state.inner", state.inner, twin.state.inner, step=step, rows=~done)
        compare(
            check, "state.episode_step", state.episode_step, twin.state.episode_step, step=step, rows=~done
        )
        compare(
            check,
            "state.episode_return",
            state.episode_return,
            twin.state.episode_return,
            step=step,
            rows=~done,
        )
        compare(check, "state.done", state.done, torch.zeros(num_envs, dtype=torch.bool), step=step)
        # A restarted row holds the fresh start as the environment carries it over from the episode that ended
        # (_carry: a curriculum's level, a batch's per-task tallies); the twin holds that ended episode.
        carried = fresh.state._replace(inner=env._carry(twin.state.inner, fresh.state.inner))
        compare_restarted(check, "reset", state, carried, env, step=step, rows=done)
        now = env.observe()
        for name in AFTER_RESET_FIELDS:
            compare(check, name, getattr(result, name), getattr(now, name), step=step)

        length += 1
        paid += result.reward.detach().cpu().double()
        compare(check, "episode_length", result.episode_length, length, step=step, rows=done)
        compare(
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
        A :class:`~rl_gpu.envs.testing.CheckReport`; ``details["frozen_steps"]`` counts frozen row-steps
        checked and ``details["rows_reset"]`` the rows reset by ``reset_rows``.

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
        previous = tree_map(lambda t: t.detach().cpu(), result)
        frozen = before.done.cpu()
        mask = result.action_mask.cpu() | frozen.unsqueeze(1)
        action = sample_actions(env, mask, generator)
        try:
            result = env.step(action)
        except ValueError as exc:
            raise EnvCheckError(check, f"a step with frozen rows raised: {exc}", step=step) from exc
        check_result(check, env, result, step)
        after = env.state
        compare_tree(check, "frozen state", after, before, step=step, rows=frozen)
        compare(check, "frozen reward", result.reward, zero_reward, step=step, rows=frozen)
        compare(check, "frozen terminated", result.terminated, no, step=step, rows=frozen)
        compare(check, "frozen truncated", result.truncated, no, step=step, rows=frozen)
        for name in AFTER_RESET_FIELDS:
            compare(
                check,
                f"frozen {name}",
                getattr(result, name),
                getattr(previous, name),
                step=step,
                rows=frozen,
            )
        compare(check, "frozen final_obs", result.final_obs, previous.obs, step=step, rows=frozen)
        done = result.done.cpu()
        compare(check, "state.done", after.done, frozen | done, step=step)
        length += (~frozen).long()
        paid += result.reward.detach().cpu().double()
        compare(check, "episode_length", result.episode_length, length, step=step, rows=done)
        compare(
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
            compare_restarted(check, "reset_rows", after, fresh.state, env, step=step, rows=rows)
            compare(check, "reset_rows state.done", after.done, no, step=step, rows=rows)
            compare_tree(check, "untouched state", after, before, step=step, rows=~rows)
            compare_results(check, result, env.observe(), step=step)
            compare(check, "reset_rows reward", result.reward, zero_reward, step=step)
            length[rows] = 0
            paid[rows] = 0.0
            rows_reset += int(rows.sum())
    return CheckReport(
        check, num_steps, transitions, episodes, {"frozen_steps": frozen_steps, "rows_reset": rows_reset}
    )
