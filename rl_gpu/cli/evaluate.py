"""``rl-gpu evaluate`` / ``python -m rl_gpu.evaluate``: a checkpoint's results on fresh, training-disjoint
seeds.

By default the checkpoint is evaluated as its run's final evaluation was: the run's
``--final-eval-episodes``, deterministic or sampled actions as its ``--deterministic-eval`` chose, at most its
``--num-envs`` environments at a time. ``--episodes``, ``--num-envs``, ``--deterministic`` and ``--sample``
override that protocol.

``--video PATH.mp4`` (MuJoCo tasks) also films one episode of the policy from a fresh start, deterministic
unless ``--sample``, with a camera that tracks the robot (``--video-steps`` caps its length).

Two-player zero-sum games small enough to enumerate (RussianRoulette-v0; LeducHoldem-v0 with OpenSpiel
installed) also get the exact exploitability of the policy, played as the protocol plays it (deterministic or
sampled), and of the uniform-random policy (:mod:`rl_gpu.interop.exploitability`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Sequence

import torch
import tyro

from rl_gpu.cli.parsing import check_trusted_env, fail, flag_as_positional, parse
from rl_gpu.core.device import check_threads
from rl_gpu.core.schema import check_bounds, check_fields, flag_name
from rl_gpu.envs.registry import named_ids_only
from rl_gpu.runtime.allocator import keep_freed_host_memory
from rl_gpu.training.config import MAX_EPISODES

MAX_VIDEO_STEPS = 10**6
"""Longest --video-steps (about 14 hours of video at HalfCheetah's 20 frames per second)."""

PROG = "rl-gpu evaluate"
ACTIONS = tyro.conf.create_mutex_group(
    required=False, title="actions (default: as the run's final evaluation chose them)")
EPISODES_HINT = "(default: the run's --final-eval-episodes)"
NUM_ENVS_HINT = "(default: the run's --num-envs, at most the episodes)"


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluate a checkpoint against the environment's opponent (turn-based games) or for return."""

    checkpoint: tyro.conf.Positional[Path]
    """checkpoint file written by `rl-gpu train` (best.pt or last.pt); also taken as --checkpoint PATH"""
    episodes: Annotated[int | None, tyro.conf.arg(help_behavior_hint=EPISODES_HINT)] = None
    """episodes to play"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    seed: int = 0
    """evaluation stream; combined with the run's seed into seeds disjoint from training and validation"""
    num_envs: Annotated[int | None, tyro.conf.arg(help_behavior_hint=NUM_ENVS_HINT)] = None
    """environments played at once"""
    deterministic: Annotated[bool, ACTIONS, tyro.conf.FlagCreatePairsOff] = False
    """play the most probable action"""
    sample: Annotated[bool, ACTIONS, tyro.conf.FlagCreatePairsOff] = False
    """sample actions from the policy"""
    json_output: Path | None = None
    """also write the results to this JSON file"""
    threads: int = 1
    """torch intra-op CPU threads"""
    video: Path | None = None
    """MuJoCo tasks: also film one episode (fresh start, deterministic unless --sample) into this MP4 file"""
    video_steps: Annotated[int | None, tyro.conf.arg(help_behavior_hint="(default: the whole episode)")] = None
    """--video: most control steps to record"""
    overwrite_video: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """--video: replace an existing file (refused otherwise)"""
    env: str | None = None
    """play this environment instead of the checkpoint's, with the same observation and actions (a text task's
    held-out problems: Addition-v0?split=test); a registered id"""
    trust_env: str | None = None
    """the checkpoint's environment id, when it is your own 'package.module:ClassName': allows importing that
    module (which runs its code); an id read from a checkpoint is never imported otherwise"""

    def __post_init__(self) -> None:
        check_fields(self, label=flag_name)
        check_bounds(self, {"episodes": MAX_EPISODES, "num_envs": MAX_EPISODES, "threads": None,
                            "video_steps": MAX_VIDEO_STEPS}, label=flag_name)
        if self.video is None and (self.video_steps is not None or self.overwrite_video):
            raise ValueError("--video-steps and --overwrite-video apply to --video, which is not given")
        if self.seed < 0:
            raise ValueError(f"--seed must be non-negative, got {self.seed}")
        if self.deterministic and self.sample:
            raise ValueError("--deterministic and --sample exclude each other")


@dataclass(frozen=True)
class Protocol:
    """How the evaluation plays: resolved from the flags and the run's saved config."""

    episodes: int
    num_envs: int
    deterministic: bool
    source: str
    """where the settings came from, for the report"""

    def describe(self) -> str:
        actions = "deterministic" if self.deterministic else "sampled actions"
        return f"{actions}, {self.episodes} episodes, {self.num_envs} at a time ({self.source})"


def run_protocol(config: EvaluateConfig, payload: dict) -> Protocol:
    """The run's final-evaluation protocol (from the checkpoint's saved ``config``), with the flags given
    overriding it; a saved value of the wrong type is a :class:`CheckpointError`."""
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.training.config import TrainConfig

    saved = payload.get("config") or {}

    def setting(name: str, kind: type, default):
        value = saved.get(name, default)
        valid = isinstance(value, bool) if kind is bool else (
            isinstance(value, int) and not isinstance(value, bool) and value > 0)
        if not valid:
            raise CheckpointError(f"{config.checkpoint}: malformed checkpoint (config {name} is "
                                  f"{str(value)[:40]!r})")
        return value

    run_episodes = setting("final_eval_episodes", int, TrainConfig.final_eval_episodes)
    run_num_envs = setting("num_envs", int, TrainConfig.num_envs)
    run_deterministic = setting("deterministic_eval", bool, TrainConfig.deterministic_eval)
    actions_flag = "--deterministic" if config.deterministic else "--sample" if config.sample else None
    overridden = [flag for flag, given in (("--episodes", config.episodes is not None),
                                           ("--num-envs", config.num_envs is not None),
                                           (actions_flag, actions_flag is not None)) if given]
    episodes = config.episodes if config.episodes is not None else run_episodes
    num_envs = min(config.num_envs if config.num_envs is not None else run_num_envs, episodes)
    deterministic = config.deterministic or (run_deterministic and not config.sample)
    if not overridden:
        source = "the run's final evaluation"
    elif len(overridden) == 3:
        source = "as given"
    else:
        source = f"the run's final evaluation, with {' and '.join(overridden)}"
    return Protocol(episodes, num_envs, deterministic, source)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and evaluate; exit 2 with a one-line error for bad input. The checkpoint's environment is
    built only from the registry, or by importing the module ``--trust-env`` names."""
    config = parse(EvaluateConfig, PROG, flag_as_positional(argv, "--checkpoint", PROG),
                   description=EvaluateConfig.__doc__)
    with named_ids_only([config.trust_env, config.env]):  # ids typed here are the user's own choice
        return _evaluate(config)


def _evaluate(config: EvaluateConfig) -> int:
    from rl_gpu.core.device import resolve_device
    from rl_gpu.core.errors import UsageError
    from rl_gpu.core.seeding import derive_seed
    from rl_gpu.envs.registry import is_known, make
    from rl_gpu.interop.exploitability import has_exploitability
    from rl_gpu.interop.policy_io import load_policy
    from rl_gpu.nn.actor_critic import UniformRandomPolicy
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.runtime.files import atomic_write_json, check_output
    from rl_gpu.training.evaluation import evaluate_policy

    try:
        check_threads(config.threads)
    except UsageError as e:
        fail(PROG, str(e))
    torch.set_num_threads(config.threads)
    keep_freed_host_memory()
    inputs = [config.checkpoint]
    try:
        if config.json_output is not None:
            check_output(config.json_output, inputs)
        if config.video is not None:
            from rl_gpu.interop.video import check_video_path

            check_video_path(config.video, inputs, config.overwrite_video)
            if config.json_output is not None and config.video.resolve() == config.json_output.resolve():
                raise UsageError(f"--video and --json-output name the same file {config.video}")
        device = resolve_device(config.device)
        policy, payload = load_policy(config.checkpoint, device)
        protocol = run_protocol(config, payload)
        seed = derive_seed(int(payload.get("seed") or 0), f"evaluate-{config.seed}")
        env_id = payload.get("env_id")
        if not is_known(env_id):
            raise CheckpointError(f"{config.checkpoint}: made for unknown environment {env_id!r}")
        check_trusted_env(env_id, config.checkpoint, config.trust_env)
        if config.env is not None:
            if not is_known(config.env):
                raise UsageError(f"--env {config.env!r}: unknown environment id")
            env_id = config.env

        def make_env(n: int, seed: int):
            return make(env_id, num_envs=n, device=device, seed=seed, validate_actions=False)

        try:
            probe = make_env(1, 0)
        except ImportError as e:
            raise UsageError(str(e)) from None
        spec = probe.spec
        if policy.obs_dim != spec.obs_size:
            raise CheckpointError(f"{config.checkpoint}: policy observes {policy.obs_dim} values, "
                                  f"{env_id} gives {spec.obs_size}")
        if bool(policy.is_continuous) != bool(spec.is_continuous):
            kinds = ("discrete", "continuous")
            raise CheckpointError(f"{config.checkpoint}: policy has {kinds[bool(policy.is_continuous)]} "
                                  f"actions, {env_id} takes {kinds[bool(spec.is_continuous)]} ones")
        policy_actions = policy.action_dim if policy.is_continuous else policy.num_actions
        if policy_actions != spec.action_size:
            raise CheckpointError(f"{config.checkpoint}: policy chooses among {policy_actions} actions, "
                                  f"{env_id} takes {spec.action_size}")
        if config.video is not None:
            from rl_gpu.interop.video import video_setup

            video_env, renderer = video_setup(probe, env_id, lambda: make_env(1, derive_seed(seed, "video")))
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    update, steps = payload.get("update"), payload.get("global_step")
    print(f"{env_id}: checkpoint {config.checkpoint} (update {update if update is not None else '?'}, "
          f"{f'{steps:,}' if steps is not None else 'unknown'} training steps) on {device}")
    print(f"protocol: {protocol.describe()}")
    result = evaluate_policy(policy, make_env, protocol.episodes, seed, num_envs=protocol.num_envs,
                             deterministic=protocol.deterministic)
    multi = result.num_players > 1  # a game's seats as agents too: the learner played one seat per game
    print("policy:  " + result.describe(multi).replace("\n", "\n         "))
    report = {"checkpoint": str(config.checkpoint), "env": env_id, "policy": result.to_dict(),
              "protocol": {"episodes": protocol.episodes, "num_envs": protocol.num_envs,
                           "deterministic": protocol.deterministic, "source": protocol.source}}
    if not spec.is_continuous:
        random_result = evaluate_policy(UniformRandomPolicy(), make_env, protocol.episodes, seed,
                                        num_envs=protocol.num_envs)
        print("random:  " + random_result.describe(multi).replace("\n", "\n         "))
        report["random"] = random_result.to_dict()
    if payload.get("algo") == "distill":
        report["teacher"] = teacher_report(payload, config, device, protocol, seed, result)
    if has_exploitability(probe):
        report["exploitability"] = exploitability_report(probe, policy, protocol.deterministic)
    if config.video is not None:
        from rl_gpu.envs.mujoco.render import RenderError
        from rl_gpu.interop.video import record_episode

        # Deterministic unless --sample: a film shows what the policy does, not its exploration noise.
        generator = torch.Generator(device=device).manual_seed(derive_seed(seed, "video-policy"))
        try:
            video = record_episode(policy, video_env, config.video, max_steps=config.video_steps,
                                   deterministic=not config.sample, generator=generator,
                                   renderer=renderer,
                                   inputs=inputs, overwrite=config.overwrite_video)
        except (UsageError, RenderError) as e:
            fail(PROG, str(e))
        finally:
            if renderer is not None:
                renderer.close()
            video_env.close()
        print(f"video:   {video.describe()}")
        report["video"] = video.to_dict()
    if config.json_output is not None:
        try:
            atomic_write_json(config.json_output, report, inputs)
        except UsageError as e:
            fail(PROG, str(e))
    return 0


def teacher_report(payload: dict, config: EvaluateConfig, device, protocol: Protocol, seed: int, student) -> dict:
    """A distilled student's teacher, evaluated the same way on its own environment, and the student's return as a
    share of the teacher's (printed; a teacher that cannot be read is reported, not fatal)."""
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.registry import make
    from rl_gpu.interop.policy_io import load_policy
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.training.evaluation import evaluate_policy

    section = (payload.get("config") or {}).get("distill") or {}
    path = section.get("teacher") if isinstance(section, dict) else None
    try:
        if not isinstance(path, str) or not path:
            raise UsageError("the checkpoint records no teacher")
        teacher, teacher_payload = load_policy(path, device)
        teacher_id = teacher_payload.get("env_id")
        check_trusted_env(teacher_id, Path(path), config.trust_env)
        result = evaluate_policy(teacher, lambda n, s: make(teacher_id, num_envs=n, device=device, seed=s,
                                                             validate_actions=False),
                                 protocol.episodes, seed, num_envs=protocol.num_envs,
                                 deterministic=protocol.deterministic)
    except (UsageError, CheckpointError, ValueError, OSError) as e:
        print(f"teacher: not evaluated: {e}")
        return {"error": str(e)}
    share = student.mean_return / result.mean_return if result.mean_return else float("nan")
    print(f"teacher: {result.describe(False)} on {teacher_id} ({path}); the student scores {share:.1%} of it")
    return {"checkpoint": path, "env": teacher_id, **result.to_dict(), "student_share": share}


def exploitability_report(env, policy, deterministic: bool) -> dict:
    """Print the exact exploitability of the policy and of the uniform-random one (games small enough to
    enumerate) and return them for the JSON report; a game that needs OpenSpiel without it installed prints
    why it is skipped instead (the evaluation itself is complete)."""
    from rl_gpu.core.errors import UsageError
    from rl_gpu.interop.exploitability import measure_exploitability
    from rl_gpu.nn.actor_critic import UniformRandomPolicy

    actions = "deterministic" if deterministic else "sampled actions"
    try:
        measured = measure_exploitability(env, policy, deterministic=deterministic)
        random = measure_exploitability(env, UniformRandomPolicy())
    except (UsageError, ValueError) as e:  # OpenSpiel missing; a policy whose probabilities are not finite
        print(f"exploit: not computed: {e}")
        return {"skipped": str(e)}
    print(f"exploit: policy {measured.describe()}, {actions}\n"
          f"         random {random.describe()}\n"
          f"         ({measured.definition})")
    return {"policy": measured.to_dict(), "random": random.to_dict(), "deterministic": deterministic}


if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
