"""Algorithms by name: each entry is an :class:`AlgorithmSpec`, everything the training loop, the configuration and
the command line need to know about an algorithm without importing it.

The training configuration holds ``algo`` and that algorithm's own hyper-parameters (its config class); ``--help``,
the ``--algo`` choices, the default steps per iteration and the checks of what an algorithm cannot run all come
from here, so ``rl_gpu.training`` and ``rl_gpu.cli`` never name an algorithm's package (an import contract keeps
it so). An algorithm of your own is one :func:`register_algorithm` call::

    register_algorithm(AlgorithmSpec(
        name="my_algo", config="my_package.algo:MyConfig", factory="my_package.algo:MyAlgorithm",
        summary="what it does, in one line"))

``config`` is a frozen dataclass of hyper-parameters with defaults (its fields become flags; its
``__post_init__`` refuses bad values with ``ValueError``); ``factory`` is a class with
``from_setup(setup, config) -> Algorithm`` (:mod:`rl_gpu.algos.base`). Both are imported on first use.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from rl_gpu.algos.precision import PRECISIONS
from rl_gpu.algos.schedules import LR_SCHEDULES
from rl_gpu.core.errors import UsageError
from rl_gpu.core.named import NamedRegistry, load_entry

COMPILE_MODES = ("off", "inductor", "cudagraphs")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_ENTRY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm: where its code is, and what it can run (checked before anything is written)."""

    name: str
    """``--algo`` value (lowercase letters, digits, ``_``)."""
    config: str
    """``"module:Class"`` of its hyper-parameters: a frozen dataclass whose fields all have defaults."""
    factory: str
    """``"module:Class"`` with ``from_setup(setup, config) -> Algorithm``."""
    summary: str
    """One line for ``--help``."""
    default_num_steps: int = 128
    """Environment steps per iteration when ``--num-steps`` is not given (turn-based games: their longest game)."""
    self_play: bool = False
    """Trains with ``--self-play`` (a league of its own snapshots as the opponent; the algorithm takes an
    ``opponent`` and hands back its last rollout, as PPO does)."""
    self_play_only: bool = False
    """Self-play by itself (two-player games only, no goal to meet: its updates are its budget)."""
    population: str | None = None
    """``"module:Class"``: trains ``--parallel`` populations, ``Class(members, env)`` from K algorithms built
    alone and one environment of their rows together, whose ``iterate(active)`` returns an
    :class:`~rl_gpu.algos.iteration.Iteration` of ``[K]`` tensors; None: no ``--parallel``."""
    pbt: str | None = None
    """``"module:Class"``: population-based training over that population (``--pbt``),
    ``Class(population, interval, seed)`` with ``after_iteration(result, active)`` and a ``lineage``."""
    torchrun: bool = True
    """Runs under torchrun with several processes."""
    step_budget: bool = True
    """Trains for ``--total-timesteps`` (else only for ``--max-updates``)."""
    compile_modes: tuple[str, ...] = COMPILE_MODES
    """The ``--compile`` modes it has (``off`` always; ``auto`` resolves to one of them)."""
    compile_auto: bool = True
    """``--compile auto`` takes the device's default mode (else it is ``off``)."""
    agents: bool = False
    """Trains environments of several agents acting at once (``spec.num_agents`` > 1, an agent axis in the
    rollout: :mod:`rl_gpu.collect.agents`)."""
    policies: bool = False
    """Trains a policy of any registered kind (``--policy KIND``; :mod:`rl_gpu.nn.kinds`), built through
    ``Setup.policy``; otherwise it builds its own and ``--policy`` is refused."""
    memory: bool | None = None
    """Takes ``--memory`` (a policy with memory); None: as :attr:`policies`."""
    lr_schedules: tuple[str, ...] = ("constant", "linear")
    """The ``--lr-schedule`` kinds it takes (:mod:`rl_gpu.algos.schedules`): ``cosine`` and ``step`` need the
    :class:`~rl_gpu.algos.optim.LearningRateSchedule` mixin (``PROGRESS_SCHEDULES``), ``adaptive-kl`` a KL
    measured per minibatch (PPO's update)."""
    precisions: tuple[str, ...] = ("fp32",)
    """The ``--precision`` modes it takes (:mod:`rl_gpu.algos.precision`)."""
    flag_needs: tuple[tuple[str, str], ...] = ()
    """``(field, switch)`` pairs of its own section: ``field`` does something only with the boolean ``switch`` on,
    so giving it with the switch off is refused (``rl-gpu train`` checks every flag it is given)."""
    ignores: tuple[str, ...] = ()
    """Settings it does not use, training ones or fields its section inherits (IMPALA's ``clip_coef``), refused
    when given rather than silently ignored."""
    asynchronous: bool = False
    """Learns while collecting (``--async-collect``; :mod:`rl_gpu.algos.ppo.asynchronous`)."""
    preset_of: str | None = None
    """Takes the presets of this algorithm (``"ppo"``: its environment presets, section included) instead of only
    the task's keys over the global defaults."""
    preset_section: tuple[str, ...] | None = None
    """With ``preset_of``: the keys of that algorithm's section it takes (None: all of them)."""
    default_env: str | None = None
    """The environment ``rl-gpu train --algo NAME`` trains (and ``--help`` shows the preset of) when ``--env`` is not
    given; None: the project's default."""
    check: str | None = None
    """``"module:function"``: ``check(config)`` raises ``UsageError`` for a run it cannot make (settings that
    together leave nothing to learn, say); called when a run starts, before anything is written
    (:meth:`check_start`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"algorithm name must be lowercase letters, digits and '_' (at most 32), got "
                             f"{self.name!r}")
        for what in ("config", "factory"):
            if not isinstance(getattr(self, what), str) or not _ENTRY.fullmatch(getattr(self, what)):
                raise ValueError(f"{what} must look like 'package.module:Name', got {getattr(self, what)!r}")
        for what in ("check", "population", "pbt"):
            value = getattr(self, what)
            if value is not None and (not isinstance(value, str) or not _ENTRY.fullmatch(value)):
                raise ValueError(f"{what} must look like 'package.module:Name', got {value!r}")
        if self.pbt is not None and self.population is None:
            raise ValueError("pbt trains over a population: give population too")
        if isinstance(self.default_num_steps, bool) or not isinstance(self.default_num_steps, int) \
                or self.default_num_steps <= 0:
            raise ValueError(f"default_num_steps must be a positive int, got {self.default_num_steps!r}")
        if "off" not in self.compile_modes or not set(self.compile_modes) <= set(COMPILE_MODES):
            raise ValueError(f"compile_modes must include 'off' and be among {COMPILE_MODES}, got "
                             f"{self.compile_modes!r}")

    def config_class(self) -> type:
        """The hyper-parameters' dataclass (imported on first use)."""
        cls = load_entry(self.config)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"algorithm {self.name!r}: {self.config} is not a dataclass")
        return cls

    def num_steps_for(self, spec: Any) -> int:
        """T when ``--num-steps`` is not given, for environments of ``spec`` (an ``EnvSpec``): a turn-based game's
        longest game (whole games are collected), else :attr:`default_num_steps`."""
        if spec.num_players > 1 and spec.episode_horizon is not None:
            return int(spec.episode_horizon)
        return self.default_num_steps

    def default_config(self) -> Any:
        """Its hyper-parameters' defaults."""
        return self.config_class()()

    def build(self, setup: Any, config: Any) -> Any:
        """The algorithm bound to ``setup`` (:class:`~rl_gpu.algos.base.Setup`) with hyper-parameters ``config``."""
        algo = load_entry(self.factory).from_setup(setup, config)
        schedule = getattr(setup, "lr_schedule", None)
        if schedule is not None and schedule.kind not in self.lr_schedules:
            raise ValueError(f"--lr-schedule {schedule.kind} does not apply to --algo {self.name} (it takes "
                             f"{', '.join(self.lr_schedules)})")
        if schedule is not None and hasattr(algo, "lr_schedule"):
            algo.lr_schedule = schedule
        elif schedule is not None and schedule.kind not in ("constant", "linear"):
            # An algorithm of one's own without the mixin would silently keep its rate: refused instead.
            raise ValueError(f"--lr-schedule {schedule.kind} needs an algorithm with a learning-rate schedule "
                             f"(rl_gpu.algos.optim.LearningRateSchedule); {type(algo).__name__} has none")
        return algo

    def build_population(self, members: list, env: Any) -> Any:
        """The ``--parallel`` population of ``members`` (``ValueError`` when they cannot be one)."""
        if self.population is None:
            raise ValueError(f"--algo {self.name} trains no populations")
        return load_entry(self.population)(members, env)

    def build_pbt(self, population: Any, interval: int, seed: int) -> Any:
        """Population-based training over ``population`` (``--pbt``)."""
        if self.pbt is None:
            raise ValueError(f"--algo {self.name} has no population-based training")
        return load_entry(self.pbt)(population, interval, seed)

    def check_run(self, config: Any) -> None:
        """Refuse a configuration (``TrainConfig``) this algorithm cannot train, naming the flag: the
        capabilities above (checked whenever a configuration is built)."""
        if config.parallel and not self.population:
            able = " or ".join(n.upper() for n in algorithm_names() if algorithm_spec(n).population) \
                or "no algorithm"
            raise UsageError(f"--parallel trains populations of {able} only, not --algo {self.name}: without "
                             "--parallel the seeds run one after another")
        league = " or ".join(n.upper() for n in algorithm_names() if algorithm_spec(n).self_play) or "no algorithm"
        refused = [(config.self_play and not self.self_play, "--self-play",
                    "it is self-play by itself; --self-play is the league of " + league if self.self_play_only
                    else "it has no league of its own snapshots; " + league + " has"),
                   (config.total_timesteps is not None and not self.step_budget, "--total-timesteps",
                    "it trains for --max-updates iterations"),
                   (config.compile not in ("auto", *self.compile_modes), f"--compile {config.compile}",
                    f"its modes are {', '.join(self.compile_modes)}"),
                   (config.policy != "auto" and not self.policies, f"--policy {config.policy}",
                    "it builds its own networks"),
                   (config.memory != "none" and not (self.policies if self.memory is None else self.memory),
                    f"--memory {config.memory}", "it builds its own networks"),
                   (config.schedule_kind not in self.lr_schedules, f"--lr-schedule {config.schedule_kind}",
                    f"it takes {', '.join(self.lr_schedules)}"),
                   (config.parallel and config.schedule_kind == "adaptive-kl", "--parallel with --lr-schedule "
                    "adaptive-kl", "a population's stacked update measures no KL per member"),
                   (config.precision not in self.precisions, f"--precision {config.precision}",
                    f"it trains in {', '.join(self.precisions)}"),
                   (config.async_collect and not self.asynchronous, "--async-collect",
                    "it collects and learns in turn"),
                   (config.double_buffer and not self.asynchronous, "--double-buffer",
                    "it collects with its own loop"),
                   (config.double_buffer and (config.parallel or config.self_play or config.uses_memory),
                    "--double-buffer with --parallel, --self-play or --memory",
                    "double-buffered collection runs one feed-forward learner on a single-player task"),
                   (config.async_collect and (config.parallel or config.self_play or config.uses_memory),
                    "--async-collect with --parallel, --self-play or --memory",
                    "learning while collecting runs one feed-forward learner on a single-player task"),
                   (config.parallel and config.precision != "fp32", f"--parallel with --precision {config.precision}",
                    "a population's stacked update runs in fp32"),
                   (config.uses_memory and config.precision != "fp32", f"--memory with --precision {config.precision}",
                    "a policy with memory trains in fp32 for now"),
                   (config.parallel and getattr(config.algo_params, "ent_coef_final", None) is not None,
                    "--parallel with --ent-coef-final", "a population's members keep their own ent_coef")]
        if config.memory != "none":
            refused += [(config.parallel, f"--parallel with --memory {config.memory}",
                         "a population stacks the built-in actor-critics")]
        if config.policy != "auto":
            refused += [(config.self_play, f"--self-play with --policy {config.policy}",
                         "the league's opponents are the built-in actor-critics"),
                        (config.parallel, f"--parallel with --policy {config.policy}",
                         "a population stacks the built-in actor-critics")]
        for bad, flag, why in refused:
            if bad:
                raise UsageError(f"{flag} does not apply to --algo {self.name} ({why}): drop it")

    def check_start(self, config: Any) -> None:
        """The algorithm's own ``check`` of a whole run, when one starts (before anything is written)."""
        if self.check is not None:
            load_entry(self.check)(config)


PROGRESS_SCHEDULES = ("constant", "linear", "cosine", "step")
"""The schedules an algorithm with the :class:`~rl_gpu.algos.optim.LearningRateSchedule` mixin takes (all but
``adaptive-kl``)."""

_ALGORITHMS = NamedRegistry(AlgorithmSpec, "algorithm")


def register_algorithm(spec: AlgorithmSpec, *, override: bool = False) -> None:
    """Make ``spec`` trainable as ``--algo spec.name`` (``ValueError`` for a name taken, unless ``override``)."""
    _ALGORITHMS.register(spec, override)


def unregister_algorithm(name: str) -> None:
    """Remove ``name`` (a plugin's tests clean up with it)."""
    _ALGORITHMS.unregister(name)


def algorithm_names() -> tuple[str, ...]:
    """Every registered ``--algo`` value, built-in ones first."""
    return _ALGORITHMS.names()


def algorithm_spec(name: object) -> AlgorithmSpec:
    """The spec registered as ``name``; :class:`~rl_gpu.core.errors.UsageError` naming the known ones otherwise."""
    return _ALGORITHMS.get(name)


def make_algorithm(name: str, setup: Any, config: Any) -> Any:
    """Build algorithm ``name`` on ``setup`` with its own hyper-parameters ``config``. Raises ``ValueError`` for an
    unknown name or a setup the algorithm cannot run (the message says why)."""
    return algorithm_spec(name).build(setup, config)


register_algorithm(AlgorithmSpec(
    name="ppo", config="rl_gpu.algos.ppo.config:PPOConfig", factory="rl_gpu.algos.ppo.algorithm:PPO",
    summary="proximal policy optimisation (on-policy; discrete or continuous actions)",
    self_play=True, population="rl_gpu.algos.population.ppo:PopulationPPO", pbt="rl_gpu.algos.population.pbt:PBT",
    policies=True, lr_schedules=LR_SCHEDULES, precisions=PRECISIONS, flag_needs=(("norm_reward_clip", "norm_reward"),),
    asynchronous=True))
register_algorithm(AlgorithmSpec(
    name="sac", config="rl_gpu.algos.sac.config:SACConfig", factory="rl_gpu.algos.sac.algorithm:SAC",
    summary="soft actor-critic (off-policy; continuous actions)", default_num_steps=1,
    lr_schedules=PROGRESS_SCHEDULES,
    check="rl_gpu.algos.offpolicy.config:check_run", flag_needs=(("target_entropy", "autotune"),)))
register_algorithm(AlgorithmSpec(
    name="td3", config="rl_gpu.algos.td3.config:TD3Config", factory="rl_gpu.algos.td3.algorithm:TD3",
    summary="twin delayed DDPG (off-policy; continuous actions)", default_num_steps=1,
    lr_schedules=PROGRESS_SCHEDULES,
    check="rl_gpu.algos.offpolicy.config:check_run"))
register_algorithm(AlgorithmSpec(
    name="neurd", config="rl_gpu.algos.neurd.config:NeuRDConfig", factory="rl_gpu.algos.neurd.algorithm:NeuRD",
    summary="full-width neural replicator dynamics (two-player zero-sum games small enough to enumerate)",
    default_num_steps=1, self_play_only=True, torchrun=False, step_budget=False, compile_modes=("off",),
    ignores=("num_envs",)))
register_algorithm(AlgorithmSpec(
    name="mappo", config="rl_gpu.algos.mappo.config:MAPPOConfig", factory="rl_gpu.algos.mappo.algorithm:MAPPO",
    summary="multi-agent PPO with a centralised critic (worlds of several agents acting at once)",
    agents=True, memory=True, policies=True, compile_modes=("off", "inductor"), lr_schedules=LR_SCHEDULES,
    precisions=PRECISIONS,
    population="rl_gpu.algos.population.mappo:PopulationMAPPO", flag_needs=(("norm_reward_clip", "norm_reward"),),
    self_play=True))
register_algorithm(AlgorithmSpec(
    name="ippo", config="rl_gpu.algos.mappo.config:MAPPOConfig", factory="rl_gpu.algos.mappo.algorithm:IPPO",
    summary="independent PPO, each agent's critic on its own observation (worlds of several agents)",
    agents=True, memory=True, policies=True, compile_modes=("off", "inductor"), lr_schedules=LR_SCHEDULES,
    precisions=PRECISIONS,
    population="rl_gpu.algos.population.mappo:PopulationMAPPO", flag_needs=(("norm_reward_clip", "norm_reward"),),
    self_play=True))
register_algorithm(AlgorithmSpec(
    name="distill", config="rl_gpu.algos.distill.config:DistillConfig",
    factory="rl_gpu.algos.distill.algorithm:Distill",
    summary="a student learns a trained teacher's actions on its own rollouts (DAgger; --teacher best.pt)",
    default_num_steps=32, torchrun=False, compile_modes=("off",), preset_of="ppo",
    preset_section=("update_epochs", "num_minibatches", "max_grad_norm")))
_LM_PRECISIONS = ("fp32", "bf16", "auto")
"""The language-model algorithms' precisions (bf16 needs no loss scaling; fp16 would)."""
_LM_SPEC = dict(torchrun=False, compile_modes=("off",), compile_auto=False, precisions=_LM_PRECISIONS,
                default_env="Addition-v0", ignores=("normalize_obs", "init_log_std"))
"""What the language-model algorithms (SFT, GRPO, RLHF-PPO) can run alike."""
_LM_COMPILE = ("off", "inductor", "cudagraphs")
"""The algorithms that generate compile their decoding step (rl_gpu.algos.lm.decode); ``auto`` is eager."""
register_algorithm(AlgorithmSpec(
    name="sft", config="rl_gpu.algos.lm.config:SFTConfig", factory="rl_gpu.algos.lm.sft:SFT",
    summary="supervised fine-tuning of a language-model policy on a text task's reference answers (GRPO's warm start)",
    **_LM_SPEC))
register_algorithm(AlgorithmSpec(
    name="grpo", config="rl_gpu.algos.lm.config:GRPOConfig", factory="rl_gpu.algos.lm.grpo:GRPO",
    summary="GRPO / RLOO: a language-model policy learns a text task's reward, each response against the others "
            "to its prompt",
    **{**_LM_SPEC, "compile_modes": _LM_COMPILE}))
register_algorithm(AlgorithmSpec(
    name="rlhf_ppo", config="rl_gpu.algos.lm.config:RLHFPPOConfig", factory="rl_gpu.algos.lm.rlhf_ppo:RLHFPPO",
    summary="RLHF's PPO: a language-model policy, a per-token KL penalty to its start, GAE over tokens, a value head",
    **{**_LM_SPEC, "compile_modes": _LM_COMPILE}))
register_algorithm(AlgorithmSpec(
    name="appo", config="rl_gpu.algos.vtrace.config:APPOConfig", factory="rl_gpu.algos.vtrace.algorithm:APPO",
    summary="PPO's clipped objective on V-trace advantages and targets (single-agent tasks)",
    compile_modes=("off", "inductor"), lr_schedules=LR_SCHEDULES, preset_of="ppo", asynchronous=True,
    flag_needs=(("norm_reward_clip", "norm_reward"),)))
register_algorithm(AlgorithmSpec(
    name="impala", config="rl_gpu.algos.vtrace.config:IMPALAConfig", factory="rl_gpu.algos.vtrace.algorithm:IMPALA",
    summary="IMPALA's V-trace actor-critic (single-agent tasks)", compile_modes=("off", "inductor"),
    lr_schedules=LR_SCHEDULES, preset_of="ppo", preset_section=("gamma", "ent_coef", "vf_coef", "reward_scale"),
    asynchronous=True,
    ignores=("clip_coef", "clip_vloss"), flag_needs=(("norm_reward_clip", "norm_reward"),)))
