"""Several tasks in one batch (``multitask:A|B|...``): each block of rows steps exactly as its task alone would from
the same state with the same actions (resets included), the task one-hot, the row split, per-task statistics and
evaluations, the contract checks, and clear refusals. The ``action_perm`` and ``action_sign`` wrappers against the
plain task."""

import math

import pytest
import torch

from rl_gpu import make
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.multitask import MultiTaskEnv, split_rows
from rl_gpu.training.evaluation import evaluate_policy

TASKS = "CartPole-v1|CartPole-v1?action_perm=1,0|CartPole-v1?length=1.0@2"


def test_each_block_steps_as_its_task_alone():
    env = make(f"multitask:{TASKS}", num_envs=10, seed=4, max_episode_steps=30)
    assert env.task_rows == (3, 2, 5) and env.obs_shape == (7,)
    alone = [make(t, num_envs=n, seed=0, max_episode_steps=30)
             for t, n in zip(env.task_ids, env.task_rows)]
    g = torch.Generator().manual_seed(0)
    for child, block in zip(alone, [slice(0, 3), slice(3, 5), slice(5, 10)]):
        inner = type(child.state.inner)(*(t[block] for t in env.state.inner[2:]))
        child.set_state(child.initial_state(inner))
    ends = 0
    for _ in range(80):
        action = torch.randint(0, 2, (10,), generator=g)
        step = env.step(action)
        # Fresh starts of finished rows are the batch's own draws: inject them into the tasks alone.
        for k, (child, block) in enumerate(zip(alone, [slice(0, 3), slice(3, 5), slice(5, 10)])):
            ref = child.step_state(child.state, action[block], child.state.inner)[1]
            assert torch.equal(step.final_obs[block, :4], ref.final_obs)
            assert torch.equal(step.reward[block], ref.reward)
            assert torch.equal(step.terminated[block], ref.terminated)
            assert torch.equal(step.truncated[block], ref.truncated)
            onehot = torch.zeros(block.stop - block.start, 3)
            onehot[:, k] = 1
            assert torch.equal(step.obs[block, 4:], onehot)
            inner = type(child.state.inner)(*(t[block] for t in env.state.inner[2:]))
            child.set_state(child.initial_state(inner)._replace(episode_step=env.state.episode_step[block]))
        ends += int((step.terminated | step.truncated).sum())
    assert ends > 10


def test_per_task_statistics_count_each_task_apart():
    env = make(f"multitask:{TASKS}", num_envs=9, seed=1)
    returns = [[] for _ in range(3)]
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        step = env.step(torch.randint(0, 2, (9,), generator=g))
        for row in torch.nonzero(step.terminated | step.truncated).flatten().tolist():
            returns[int(env.row_tasks[row])].append(float(step.episode_return[row]))
    stats = env.task_stats()
    for k in range(3):
        assert math.isclose(float(stats[f"{k}/return"]), sum(returns[k]) / len(returns[k]), rel_tol=1e-9)
    again = env.task_stats()  # no episode since: the last means stay, nothing is NaN
    assert all(torch.equal(again[k], stats[k]) for k in stats)


def test_evaluation_reports_each_task():
    class Left(torch.nn.Module):
        is_continuous = False

        def act(self, obs, action_mask=None, generator=None, deterministic=False, noise=None, **kw):
            from rl_gpu.core.types import PolicyOutput
            n = obs.shape[0]
            return PolicyOutput(torch.zeros(n, dtype=torch.long), torch.zeros(n), torch.zeros(n))

    result = evaluate_policy(Left(), lambda n, s: make(f"multitask:{TASKS}", num_envs=n, seed=s), 40, 3,
                             success_return=9.5)
    assert [t["episodes"] for t in result.tasks] == [10, 10, 20]
    assert sum(t["episodes"] * t["mean_return"] for t in result.tasks) == pytest.approx(40 * result.mean_return)
    assert "task 2 CartPole-v1?length=1.0" in result.describe(False)


@pytest.mark.parametrize("tasks", [TASKS, "CartPole-v1|CartPole-v1?length=1.0&force_mag=5.0"])
def test_the_batch_keeps_the_contract(tasks):
    # Every generic check but batch-vs-single (a batch of one row holds one task): the block test above is its
    # multi-task form.
    from rl_gpu.envs.testing.contract import (check_action_masks, check_autoreset, check_determinism,
                                              check_frozen_rows)

    def factory(num_envs, *, seed, autoreset):
        return make(f"multitask:{tasks}", num_envs=num_envs, seed=seed, autoreset=autoreset, max_episode_steps=20)

    common = {"num_envs": 16, "num_steps": 100}
    check_action_masks(factory, seed=0, **common)
    check_determinism(factory, 0, **common)
    check_frozen_rows(factory, seed=0, **common)
    assert check_autoreset(factory, seed=0, **common).episodes > 0


def test_rows_split_by_weight():
    assert split_rows(10, [1, 1, 2]) == [3, 2, 5]
    assert split_rows(7, [1, 0, 1]) == [4, 0, 3]
    assert split_rows(3, [1, 1, 1]) == [1, 1, 1]
    assert sum(split_rows(4096, [0.3, 0.3, 0.4])) == 4096
    blind = MultiTaskEnv(["CartPole-v1", "CartPole-v1?length=1.0"], 4, task_id=False)
    assert blind.obs_shape == (4,)


@pytest.mark.parametrize("env_id, says", [
    ("multitask:CartPole-v1|Acrobot-v1", "differs from 'CartPole-v1' in its observation shape"),
    ("multitask:CartPole-v1|CartPoleNoVel-v1", "observation shape"),
    ("multitask:CartPole-v1@x", "is not a task"),
    ("multitask:CartPole-v1@0", "at least one of weight above 0"),
    ("multitask:CartPole-v1||CartPole-v1", "is not a task"),
    ("multitask:MinAtar-Breakout-v1", "use multitask-noid:"),
    ("multitask:LeducHoldem-v0", "several players"),
    ("multitask:gym:CartPole-v1", "stepped by another library"),
    ("multitask:multitask:CartPole-v1", "cannot itself be several tasks"),
    ("multitask:NoSuch-v0", "unknown environment id"),
])
def test_bad_batches_are_refused_in_one_line(env_id, says):
    with pytest.raises(UsageError, match=says) as info:
        make(env_id, num_envs=4)
    assert "\n" not in str(info.value)


def test_fewer_rows_than_tasks_hold_the_first_tasks():
    env = make(f"multitask:{TASKS}", num_envs=2)
    assert env.task_rows == (1, 1, 0) and env.obs_shape == (7,)
    env.step(torch.zeros(2, dtype=torch.long))


def test_an_action_permutation_is_the_task_with_its_controls_rewired():
    a = make("Acrobot-v1?action_perm=2,0,1", num_envs=6, seed=5)
    b = make("Acrobot-v1", num_envs=6, seed=5)
    g = torch.Generator().manual_seed(0)
    perm = torch.tensor([2, 0, 1])
    for _ in range(40):
        action = torch.randint(0, 3, (6,), generator=g)
        x, y = a.step(action), b.step(perm[action])
        assert torch.equal(x.obs, y.obs) and torch.equal(x.reward, y.reward)
    leduc = make("LeducHoldem-v0?action_perm=2,1,0", num_envs=4, seed=0)
    plain = make("LeducHoldem-v0", num_envs=4, seed=0)
    assert torch.equal(leduc.observe().action_mask, plain.observe().action_mask[:, [2, 1, 0]])


def test_an_action_sign_is_the_continuous_task_with_its_controls_reversed():
    a = make("Pendulum-v1?action_sign=-1", num_envs=6, seed=5)
    b = make("Pendulum-v1", num_envs=6, seed=5)
    assert a.spec.action_low == b.spec.action_low and a.spec.action_high == b.spec.action_high
    g = torch.Generator().manual_seed(0)
    for _ in range(250):  # past the time limit: resets included
        action = torch.rand(6, 1, generator=g) * 5.0 - 2.5  # some beyond the bounds: clipped after the sign
        x, y = a.step(action), b.step(-action)
        assert torch.equal(x.obs, y.obs) and torch.equal(x.reward, y.reward) and torch.equal(x.truncated, y.truncated)
    both = make("multitask:Pendulum-v1|Pendulum-v1?action_sign=-1", num_envs=4, seed=0)
    assert both.task_rows == (2, 2) and both.obs_shape == (5,)


def test_a_reversed_dimension_needs_bounds_symmetric_about_zero():
    from rl_gpu.envs.pendulum import PendulumEnv
    from rl_gpu.envs.wrappers import split_wrappers, wrapped_class

    class OneSided(PendulumEnv):
        action_low, action_high = (0.0,), (2.0,)

    _, wrapping, _ = split_wrappers("X?action_sign=-1")
    with pytest.raises(UsageError, match="reverses dimension 0, whose bounds are not symmetric about 0"):
        wrapped_class(OneSided, "X?action_sign=-1", wrapping)
    _, keep, _ = split_wrappers("X?action_sign=1")
    wrapped_class(OneSided, "X?action_sign=1", keep)  # a factor of 1 needs nothing


@pytest.mark.parametrize("env_id, says", [
    ("CartPole-v1?action_perm=0,0", "permutation of the action indices"),
    ("CartPole-v1?action_perm=0,1,2", "has 2 discrete actions, not 3"),
    ("Pendulum-v1?action_perm=0", "continuous actions"),
    ("Pendulum-v1?action_sign=2", "each 1 or -1"),
    ("Pendulum-v1?action_sign=1,-1", "has 1 dimensions, not 2"),
    ("CartPole-v1?action_sign=-1", "discrete actions or several agents"),
    ("LeducHoldem-v0?seats_as_agents=1&action_sign=-1", "neither obs_mask, frame_stack, action_perm nor action_sign"),
])
def test_bad_permutations_are_refused(env_id, says):
    with pytest.raises(UsageError, match=says):
        make(env_id, num_envs=2)


def test_parameter_variants_step_in_one_call_exactly_as_in_blocks():
    variants = ("CartPole-v1|CartPole-v1?length=1.0&gravity=12.0|CartPole-v1?masspole=0.3&force_mag=7.5"
                "|CartPole-v1?tau=0.03&x_threshold=1.5&theta_threshold_degrees=9&masscart=2.0")
    fused = MultiTaskEnv(variants, 16, seed=0, max_episode_steps=60)
    blocks = MultiTaskEnv(variants, 16, seed=0, max_episode_steps=60, fuse=False)
    assert fused._fused is not None and blocks._fused is None
    assert MultiTaskEnv(TASKS, 8)._fused is None  # a rewired task is another class: blocks
    state = blocks.state
    g = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(150):
        action = torch.randint(0, 2, (16,), generator=g)
        fresh = blocks.draw_starts(16)
        a_state, a = fused.step_state(state, action, fresh)
        b_state, b = blocks.step_state(state, action, fresh)
        for name in ("obs", "reward", "terminated", "truncated", "final_obs", "action_mask"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert all(torch.equal(x, y) for x, y in zip(a_state.inner, b_state.inner))
        state = b_state
        ends += int((b.terminated | b.truncated).sum())
    assert ends > 20


def test_a_subclass_does_not_inherit_row_params():
    from rl_gpu.envs.cartpole import CartPoleNoVelEnv

    assert CartPoleNoVelEnv.row_params and "row_params" not in CartPoleNoVelEnv.__dict__
    env = MultiTaskEnv("CartPoleNoVel-v1|CartPoleNoVel-v1?length=1.0", 4)
    assert env._fused is None  # stepped in blocks
