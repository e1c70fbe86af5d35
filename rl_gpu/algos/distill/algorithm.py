"""Teacher-student distillation by DAgger: a student learns to act as a trained teacher does, from what the
student itself sees, on the states the student itself reaches.

Shape legend: T steps, N environments, O the student's observation, P the teacher's, D / A the actions.

The teacher is a checkpoint trained on an environment that observes the same state differently (it sees more:
velocities, privileged values, clean sensors); the student trains on the run's environment. Both environments
must hold the same kind of state: each step the teacher's environment observes the student's current state
(``teacher_env._observe(state)``: a pure function of the state in every tensor environment), so no second
simulation runs. For example a teacher trained on ``CartPole-v1`` and a student on ``CartPoleNoVel-v1?frame_stack=4``
(no velocities, the last four frames), or a teacher on clean Go1 observations and a student on
``Go1-Velocity-v0?obs_noise=1&action_delay=0,2``.

Each iteration: T steps of the N environments with the student acting deterministically (what it will do when
deployed; DAgger labels the student's own states, so it needs no exploration noise), the teacher's deterministic
action recorded at every step, then ``update_epochs`` passes of ``num_minibatches`` Adam steps on the negative
log-likelihood of the teacher's actions under the student's distribution (a Gaussian student learns its mean and
its standard deviation: the spread left between the two). ``action_gap`` reports how far the student's own
action was from the teacher's (continuous: root mean square over action dimensions; discrete: the share of steps
they differed). The student is an ordinary actor-critic (its value head unused): evaluation, export, quantisation
and ``rl_gpu.load`` take it as they take any policy.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.distill.config import DistillConfig
from rl_gpu.algos.optim import LearningRateSchedule, clip_global_grad_norm, load_optimizer_state, make_adam
from rl_gpu.core.errors import UsageError
from rl_gpu.data.episodes import episode_metrics
from rl_gpu.nn.actor_critic import policy_for_env

METRICS = ("loss", "action_gap", "grad_norm", "learning_rate", *Collected._fields)


def teacher_view(teacher_path: str, env: Any) -> tuple[nn.Module, Any, str]:
    """``(teacher policy, its environment's observation of a student state, its env id)``, or a one-line
    :class:`~rl_gpu.core.errors.UsageError` when the teacher cannot label the student's states."""
    from rl_gpu.envs.base import TensorEnv
    from rl_gpu.envs.registry import make

    if not teacher_path:
        raise UsageError("--algo distill needs --teacher RUN/seed-N/best.pt (the trained policy to learn from)")
    teacher, payload = _load_teacher(teacher_path, env.device)
    teacher_id = payload.get("env_id")
    if not isinstance(env, TensorEnv):
        raise UsageError(f"--algo distill labels the student's states with the teacher's observation of them: the "
                         f"student's environment must be a tensor environment, not {type(env).__name__}")
    if not isinstance(teacher_id, str):
        raise UsageError(f"--teacher {teacher_path}: the checkpoint records no environment id")
    try:
        observer = make(teacher_id, num_envs=1, device=env.device, seed=0)
    except ValueError as e:
        raise UsageError(f"--teacher {teacher_path}: its environment {teacher_id!r} cannot be built: {e}") from None
    own = getattr(env, "_own", lambda inner: inner)

    def observe(inner: Any) -> Tensor:
        return observer._observe(own(inner))

    spec, teacher_spec = env.spec, observer.spec
    if (spec.num_actions, tuple(spec.action_shape)) != (teacher_spec.num_actions, tuple(teacher_spec.action_shape)):
        raise UsageError(f"--teacher {teacher_path}: it acts on {teacher_id} ({_actions(teacher_spec)}), the student "
                         f"on {_actions(spec)}: the actions must be the same")
    try:
        seen = observe(env.state.inner)
        teacher.act(seen.float() if seen.is_floating_point() else seen, deterministic=True)
    except Exception as e:  # noqa: BLE001 -- any failure here means the two environments hold different states
        raise UsageError(f"--teacher {teacher_path}: {teacher_id} cannot observe the states of "
                         f"{type(env).__name__} ({type(e).__name__}: {e}); the two environments must simulate the "
                         "same state") from None
    return teacher, observe, teacher_id


def _load_teacher(path: str, device: torch.device) -> tuple[nn.Module, dict]:
    """The checkpoint's policy, checked as ``rl_gpu.load`` checks it, in eval mode and frozen; one-line
    :class:`UsageError` otherwise."""
    from rl_gpu.nn.rebuild import load_policy
    from rl_gpu.runtime.checkpoint import CheckpointError

    try:
        policy, payload = load_policy(path, device)
    except CheckpointError as e:
        raise UsageError(f"--teacher {e}") from None
    return policy.requires_grad_(False), payload


def _actions(spec: Any) -> str:
    return f"{spec.num_actions} discrete actions" if spec.num_actions else f"actions of shape {tuple(spec.action_shape)}"


class Distill(LearningRateSchedule):
    """The student, the teacher and the student's optimiser (see the module docstring)."""

    resume_notes: tuple[str, ...] = ()
    metric_names = METRICS

    def __init__(self, setup: Setup, config: DistillConfig) -> None:
        self.env, self.config = setup.env, config
        self.device = self.env.device
        self.num_steps = setup.num_steps or 32
        self.teacher, self.observe_teacher, self.teacher_env_id = teacher_view(config.teacher, self.env)
        # The student's value head is never used: it reads the student's own observation, not the critic group.
        self._policy = policy_for_env(self.env.spec.policy_only(), setup.hidden_sizes, setup.normalize_obs,
                                      setup.init_log_std).to(self.device)
        rows = self.num_steps * self.env.num_envs
        if rows % config.num_minibatches:
            raise ValueError(f"--algo distill splits num_steps x num_envs = {rows} steps into --num-minibatches "
                             f"{config.num_minibatches} equal minibatches: it must divide them")
        self.initial_learning_rate = float(setup.learning_rate)
        self.anneal_lr = setup.anneal_lr
        self.lr = torch.tensor(self.initial_learning_rate, device=self.device)
        self.optimizer = make_adam(self._policy.parameters(), self.lr, self.device)
        self.shuffle_rng = torch.Generator(device=self.device).manual_seed(setup.seed_for("shuffle"))

    @classmethod
    def from_setup(cls, setup: Setup, config: DistillConfig) -> Distill:
        return cls(setup, config)

    @property
    def policy(self) -> nn.Module:
        return self._policy

    def initial_policy(self) -> nn.Module:
        return copy.deepcopy(self._policy).eval()

    @torch.no_grad()
    def collect(self) -> tuple[dict[str, Tensor], Collected]:
        """T steps with the student acting; ``{"obs", "action_mask", "teacher_action"}`` ``[T * N, ...]`` and the
        episodes that ended, plus ``action_gap``."""
        env, student, teacher = self.env, self._policy, self.teacher
        step = env.observe()
        obs, masks, targets, gaps, ended, returns, lengths = [], [], [], [], [], [], []
        for _ in range(self.num_steps):
            seen = self.observe_teacher(env.state.inner)
            target = teacher.act(seen.float() if seen.is_floating_point() else seen, step.action_mask,
                                 deterministic=True).action
            action = student.act(step.obs, step.action_mask, None, deterministic=True).action
            gaps.append((action - target).float().square().mean(-1) if student.is_continuous
                        else (action != target).float())
            obs.append(step.obs)
            masks.append(step.action_mask)
            targets.append(target)
            step = env.step(action)
            done = step.terminated | step.truncated
            ended.append(done)
            returns.append(torch.where(done, step.episode_return, 0.0))
            lengths.append(torch.where(done, step.episode_length, 0))
        gap = torch.stack(gaps).mean()
        stats = episode_metrics(torch.stack(ended), torch.stack(returns), torch.stack(lengths))
        collected = Collected.of({**stats, "transitions": torch.tensor(self.num_steps * env.num_envs,
                                                                       device=self.device)})
        batch = {"obs": torch.cat(obs), "teacher_action": torch.cat(targets),
                 "action_mask": None if masks[0] is None else torch.cat(masks),
                 "action_gap": gap.sqrt() if student.is_continuous else gap}
        return batch, collected

    def update(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(mean loss, mean gradient norm)`` of the passes over ``batch``."""
        config, student = self.config, self._policy
        size = batch["obs"].shape[0]
        mb = size // config.num_minibatches
        params = [p for p in student.parameters() if p.requires_grad]
        total_loss = torch.zeros((), device=self.device)
        total_norm = torch.zeros((), device=self.device)
        for _ in range(config.update_epochs):
            order = torch.randperm(size, generator=self.shuffle_rng, device=self.device)
            for start in range(0, size, mb):
                idx = order[start:start + mb]
                mask = None if batch["action_mask"] is None else batch["action_mask"][idx]
                log_prob, _, _ = student.evaluate(batch["obs"][idx], batch["teacher_action"][idx], mask)
                loss = -log_prob.mean()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                total_norm = total_norm + clip_global_grad_norm(params, config.max_grad_norm)
                self.optimizer.step()
                total_loss = total_loss + loss.detach()
        steps = config.update_epochs * config.num_minibatches
        student.update_normalizer(batch["obs"])
        return total_loss / steps, total_norm / steps

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        with phase("collect"):
            batch, collected = self.collect()
        with phase("update"):
            loss, grad_norm = self.update(batch)
        return Iteration(collected, self.lr.clone(),
                         {"loss": loss, "action_gap": batch["action_gap"], "grad_norm": grad_norm.float()})

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self._policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "shuffle_rng": self.shuffle_rng.get_state(), "teacher_env_id": self.teacher_env_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._policy.load_state_dict(state["policy"])
        load_optimizer_state(self.optimizer, state["optimizer"], self.lr)
        self.shuffle_rng.set_state(state["shuffle_rng"].cpu())
