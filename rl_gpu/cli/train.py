"""``rl-gpu train`` / ``python -m rl_gpu.train``: train, validate, keep the best checkpoint.

Exit codes: 0 every seed met its goal (or spent its ``--total-timesteps`` budget); 1 a seed did not within
``--max-updates``; 2 bad input (nothing on disk touched); 3 a non-finite loss, gradient or parameter stopped
training; 4 under torchrun, another process died or stopped answering; 130/143 stopped by SIGINT/SIGTERM after
saving.

Under ``torchrun`` (``torchrun --nproc-per-node K -m rl_gpu train ...``) the K processes train one policy
together, each stepping ``--num-envs`` environments of its own; rank 0 writes every file (docs/distributed.md).

Where the settings come from, lowest first: the environment's preset (:mod:`rl_gpu.cli.presets`), or a
``--config`` file, or a resumed run's saved settings; then the flags. A resumed run keeps its settings: a flag or
a ``--config`` key that would change any but the few listed in ``--resume``'s help is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import tyro

from rl_gpu.algos.registry import algorithm_names, algorithm_spec
from rl_gpu.cli.flag_modes import check_flags_apply, with_lr_flags
from rl_gpu.cli.outputs import output_callbacks
from rl_gpu.cli.parsing import fail, other_rank, parse, quiet_broken_pipe, version_text
from rl_gpu.cli.presets import describe_custom_defaults, has_preset, preset_config
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import check_may_import, named_ids_only
from rl_gpu.runtime.files import JsonReadError, read_json
from rl_gpu.training.config import (
    DEFAULT_ENV,
    RESUMABLE_CHANGES,
    TrainConfig,
    config_from_dict,
    lowered_min_updates,
)

PROG = "rl-gpu train"


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag X`` or ``--flag=X``), read before full parsing."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _flag_values(args: Sequence[str], flag: str) -> list[str]:
    """Every value ``flag`` is given in ``args``, in order."""
    return [args[i + 1] if arg == flag else arg.split("=", 1)[1] for i, arg in enumerate(args)
            if (arg == flag and i + 1 < len(args)) or arg.startswith(flag + "=")]


def _given(args: Sequence[str]) -> list[str]:
    """The option names in ``args`` (``--flag`` of ``--flag=X`` too), in order."""
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--") and arg != "--"]


SHORT_FLAGS = {"--async": "--async-collect", "--no-async": "--no-async-collect"}
"""Flags whose field names Python reserves, written short (``async`` is a keyword)."""

PRE_READ = ("--resume", "--config", "--env", "--algo")
"""Flags read before parsing (they choose the defaults the other flags override)."""


def _check_repeats(args: Sequence[str]) -> None:
    """``--resume``, ``--config``, ``--env`` or ``--algo`` given twice is refused: which run, file, preset or
    flags were meant is ambiguous. (Other flags follow the usual rule: the last one given wins.)"""
    names = _given(args)
    twice = [flag for flag in PRE_READ if names.count(flag) > 1]
    if twice:
        raise UsageError(f"{', '.join(twice)} given more than once; give it once")


def _saved_config(run_dir: Path) -> TrainConfig:
    from rl_gpu.runtime.checkpoint import load_checkpoint

    if not run_dir.is_dir():
        raise UsageError(f"--resume {run_dir}: no such run directory")
    last = run_dir / "last.pt"
    if not last.exists():
        raise UsageError(f"--resume {run_dir}: no last.pt in it (nothing to resume)")
    payload = load_checkpoint(last)
    if not isinstance(payload.get("trainer"), dict) or not isinstance(payload.get("config"), dict):
        raise UsageError(f"--resume {run_dir}: {last} is not a resumable checkpoint")
    if payload.get("pbt_member"):
        raise UsageError(f"--resume {run_dir}: a --pbt member, whose learning rate and loss coefficients PBT "
                         "changed from its saved settings, cannot be resumed alone")
    try:
        return config_from_dict(payload["config"])
    except UsageError as e:
        raise UsageError(f"--resume {run_dir}: the settings saved in {last} are invalid ({e})") from None


def _file_data(path: Path) -> tuple[dict, TrainConfig]:
    """A ``--config`` file's JSON object and the configuration it describes (checked as strictly as flags)."""
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise UsageError(f"--config {path}: {what} (a JSON file, such as a run's config.json)")
    try:
        data = read_json(path)
    except JsonReadError as e:
        raise UsageError(f"--config {e}") from None
    if not isinstance(data, dict) or "env" not in data:
        raise UsageError(f"--config {path}: not a training configuration (no 'env' key)")
    try:
        return data, dataclasses.replace(config_from_dict(data), config=path)
    except UsageError as e:
        raise UsageError(f"--config {path}: {e}") from None


def _overlay(saved: TrainConfig, data: dict, file_config: TrainConfig) -> TrainConfig:
    """``saved`` with the settings a ``--config`` file names explicitly (its other keys do not count)."""
    values = {k: getattr(file_config, k) for k in data if k in {f.name for f in dataclasses.fields(TrainConfig)}
              and k not in ("algo_params", "overwrite")}
    section = data.get(file_config.algo)
    if isinstance(section, dict) and file_config.algo == saved.algo:
        named = {k: getattr(file_config.algo_params, k) for k in section}
        values["algo_params"] = dataclasses.replace(saved.algo_params, **named)
    return dataclasses.replace(saved, **values)


def _check_env(env_id: str) -> None:
    from rl_gpu.training.preflight import check_env_id

    check_env_id(env_id)


def _defaults(args: list[str]) -> tuple[TrainConfig, TrainConfig | None, str]:
    """``(defaults for the flags, the saved settings of a resumed run or None, what the defaults are)``."""
    config_path = _flag_value(args, "--config")
    data, file_config = _file_data(Path(config_path)) if config_path is not None else (None, None)
    resume_dir = _flag_value(args, "--resume")
    if resume_dir is None and file_config is not None and file_config.resume is not None:
        resume_dir = str(file_config.resume)
    if resume_dir is not None:
        saved = _saved_config(Path(resume_dir))
        for env_id, flag in ((saved.env, "--env"), (saved.eval_env, "--eval-env")):
            check_may_import(env_id, f"--resume {resume_dir}: {Path(resume_dir) / 'last.pt'}", flag)
        default = saved if file_config is None else _overlay(saved, data, file_config)
        return dataclasses.replace(default, resume=Path(resume_dir)), saved, f"the saved settings of {resume_dir}"
    if file_config is not None:
        _check_env(file_config.env)
        for env_id, flag in ((file_config.env, "--env"), (file_config.eval_env, "--eval-env")):
            check_may_import(env_id, f"--config {config_path}", flag)
        return file_config, None, f"the settings of {config_path}"
    algo = _flag_value(args, "--algo") or "ppo"
    if algo not in algorithm_names():
        algo = "ppo"  # the parser refuses the value, naming the choices
    env_id = _flag_value(args, "--env") or algorithm_spec(algo).default_env or DEFAULT_ENV
    _check_env(env_id)
    named = f"{env_id}'s preset" if has_preset(env_id, algo) or env_id.startswith("gym:") else \
        f"the generic defaults for {env_id} (it has no preset)"
    if "--self-play" in args:
        return preset_config(env_id, algo, self_play=True), None, f"{named} for {algo} with --self-play"
    return preset_config(env_id, algo), None, f"{named} for {algo}"


def flags_of(algo: str) -> type:
    """:class:`TrainConfig` as the parser sees it when training with ``algo``: ``--algo`` chooses among the
    registered algorithms, and ``algo``'s hyper-parameters are a section of their own whose flags keep their
    plain names (``--gamma`` is the chosen algorithm's), so ``--help`` lists only the chosen one's."""
    names, params = algorithm_names(), algorithm_spec(algo).config_class()
    return _view(algo, names, params)


@functools.cache
def _view(algo: str, names: tuple[str, ...], params: type) -> type:
    taken = {f.name for f in dataclasses.fields(TrainConfig)}
    if algo in taken:
        raise UsageError(f"--algo {algo}: an algorithm cannot be named as a training setting ({algo})")
    choices = ", ".join(f"{n} ({algorithm_spec(n).summary})" for n in names)
    algo_help = (f"algorithm: {choices}; its hyper-parameters are the flags of its own section, which "
                 "`--algo ALGO --help` lists; presets are per environment and algorithm")
    fields = [("algo", Annotated[Literal[names], tyro.conf.arg(help=algo_help)],  # type: ignore[valid-type]
               dataclasses.field(default=algo)),
              ("algo_params", Annotated[typing.Any, tyro.conf.Suppress], dataclasses.field(default=None)),
              (algo, Annotated[params, tyro.conf.arg(help=f"--algo {algo} hyper-parameters (flags without a "
                                                           "prefix)")],
               dataclasses.field(default_factory=params))]
    return dataclasses.make_dataclass(f"TrainConfig_{algo}", fields, bases=(TrainConfig,), frozen=True)


def _parse(args: list[str], default: TrainConfig, description: str) -> TrainConfig:
    """Parse ``args`` over ``default`` with the flags of the algorithm ``--algo`` names (else the default's)."""
    algo = _flag_value(args, "--algo")
    if algo not in algorithm_names():
        algo = default.algo  # an unknown name is the parser's to refuse
    view = flags_of(algo)
    params = default.algo_params if default.algo == algo else algorithm_spec(algo).default_config()
    start = view(**{**_values(default), "algo": algo, "algo_params": None, algo: params})
    parsed = parse(view, PROG, args, default=start, description=description)
    try:  # the run's checks that read the algorithm's own settings (None in the view)
        return TrainConfig(**{**_values(parsed), "algo_params": getattr(parsed, parsed.algo)})
    except UsageError as e:
        fail(PROG, str(e))


def _values(config: TrainConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainConfig)}


def _clip_min_updates(args: list[str], default: TrainConfig) -> TrainConfig:
    """A ``--max-updates`` below the preset's (or file's) ``--min-updates`` lowers the latter to it, with a
    note; when both are given, the configuration's own check refuses the pair."""
    given = set(_given(args))
    if "--max-updates" not in given or "--min-updates" in given:
        return default
    try:
        max_updates = int(_flag_value(args, "--max-updates") or "")
    except ValueError:
        return default  # the parser reports it
    if lowered_min_updates(default, max_updates) is not None:
        print(f"{PROG}: note: --min-updates lowered from {default.min_updates} to {max_updates} "
              f"(--max-updates {max_updates} is below it)", file=sys.stderr)
        return dataclasses.replace(default, min_updates=max_updates)
    return default


def _changes(saved, given, names: list[str]) -> list[str]:
    """``--flag (saved X, given Y)`` for each changed setting (the PPO section's flags one by one)."""
    out = []
    for name in names:
        if dataclasses.is_dataclass(getattr(saved, name)):
            inner = [f.name for f in dataclasses.fields(getattr(saved, name))
                     if getattr(getattr(saved, name), f.name) != getattr(getattr(given, name), f.name)]
            out += _changes(getattr(saved, name), getattr(given, name), inner)
        else:
            out.append(f"--{name.replace('_', '-')} (saved {getattr(saved, name)!r}, given {getattr(given, name)!r})")
    return out


def exploitability_measure(config: TrainConfig):
    """``measure(policy)`` -> its exact exploitability, for games that have one
    (:mod:`rl_gpu.interop.exploitability`, played as validation plays: sampled or deterministic), logged at each
    validation; None for other environments, and, with a note, when the game needs a package not installed."""
    from rl_gpu.envs.registry import env_class
    from rl_gpu.interop.exploitability import has_exploitability, measure_exploitability
    from rl_gpu.nn.actor_critic import UniformRandomPolicy

    try:
        cls = env_class(config.env)
    except (UsageError, ValueError, ImportError):
        return None
    if not has_exploitability(cls):
        return None
    if config.uses_memory:
        print(f"{PROG}: note: exploitability is not measured during training: a policy with memory acts on its "
              "history, not on the information state alone", file=sys.stderr)
        return None
    measure = functools.partial(measure_exploitability, cls, deterministic=config.deterministic_eval)
    try:
        random = measure(UniformRandomPolicy())
    except UsageError as e:
        print(f"{PROG}: note: exploitability is not measured during training: {e}", file=sys.stderr)
        return None
    print(f"{PROG}: exploitability is measured at each validation; the uniform-random policy's is "
          f"{random.describe()}")
    return measure


def _interrupted(config: TrainConfig, results: list) -> int:
    from rl_gpu.training.lifecycle import continuation

    stopped = next(r for r in results if r.status == "interrupted")
    print(f"{PROG}: {stopped.reason}", file=sys.stderr)
    if len(config.seeds) > 1:
        for line in continuation(config, results, prog=PROG):
            print(f"{PROG}: {line}", file=sys.stderr)
    return 128 + (stopped.signum or signal.SIGINT)


EXIT_RANKS_LOST = 4
"""Exit code of a process of a torchrun launch that lost contact with the others (one died or hung)."""


def _quiet_code(results: list) -> int:
    """The exit code :func:`_main` reports for ``results``, without printing (ranks other than 0)."""
    from rl_gpu.training.runner import EXIT_GOAL_NOT_MET, EXIT_NUMERICAL

    stopped = next((r for r in results if r.status == "interrupted"), None)
    if stopped is not None:
        return 128 + (stopped.signum or signal.SIGINT)
    if any(r.status == "numerical_error" for r in results):
        return EXIT_NUMERICAL
    return EXIT_GOAL_NOT_MET if any(r.status == "goal_not_met" for r in results) else 0


def _main(argv: Sequence[str] | None = None) -> int:
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.runtime.distributed import RanksLost, is_main_process, process_group
    from rl_gpu.training.ranks import check_config
    from rl_gpu.training.runner import EXIT_GOAL_NOT_MET, EXIT_NUMERICAL, resume, train

    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args:
        print(version_text())
        return 0
    asking_help = "--help" in args or "-h" in args
    try:
        _check_repeats(args)
        default, saved, source = _defaults(args)
        if not asking_help and saved is None:
            default = _clip_min_updates(args, default)
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    description = (f"{TrainConfig.__doc__}\n\nThe defaults shown are {source}; "
                   f"`{PROG} --env ID --help` shows an environment's preset (`--algo ALGO` too: its preset for "
                   "that algorithm).")
    config = _parse(args, default, description)
    try:
        check_flags_apply(_given(args), config)
        config = with_lr_flags(_given(args), config)
        if "" in _flag_values(args, "--output"):
            raise UsageError("--output is empty: name the folder the run writes (default artifacts/run)")
    except UsageError as e:
        fail(PROG, str(e))
    if saved is None and source.startswith("the generic defaults") and not other_rank():
        print(describe_custom_defaults(config.env), flush=True)
    main_process = True
    try:
        if saved is not None and "--parallel" in _given(args):
            raise UsageError("--resume continues one seed alone (each seed of a --parallel run resumes alone, "
                             "from its own OUTPUT/seed-N): drop --parallel")
        if saved is not None:
            changed = [f.name for f in dataclasses.fields(TrainConfig)
                       if getattr(config, f.name) != getattr(saved, f.name) and f.name not in RESUMABLE_CHANGES]
            if changed:
                raise UsageError("settings are refused on resume (the run keeps its saved ones): cannot change "
                                 + ", ".join(_changes(saved, config, changed)))
        # Under torchrun: join the other processes (docs/distributed.md); a plain run is unchanged.
        with process_group(config.device):
            main_process = is_main_process()
            check_config(config)  # what several processes cannot run (nothing without torchrun)
            callbacks = output_callbacks(config) if main_process else []
            if saved is not None:
                results = [resume(config.resume, config, measure=exploitability_measure(config),
                                  callbacks=callbacks)]
            elif config.parallel:
                from rl_gpu.training.population import train_population

                results = train_population(config, measure=exploitability_measure(config))
            else:
                results = train(config, measure=exploitability_measure(config), callbacks=callbacks)
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; checkpoints written so far are intact", file=sys.stderr)
        return 128 + signal.SIGINT
    except RanksLost as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_RANKS_LOST
    if not main_process:  # rank 0 reports; the other processes exit with the same code, quietly
        return _quiet_code(results)
    if any(r.status == "interrupted" for r in results):
        return _interrupted(config, results)
    code = 0
    for r in results:
        if r.status == "numerical_error":
            print(f"{PROG}: seed {r.seed}: {r.reason}", file=sys.stderr)
            return EXIT_NUMERICAL
        if r.status == "goal_not_met":
            print(f"{PROG}: seed {r.seed} did not reach its goal: {r.reason}", file=sys.stderr)
            code = EXIT_GOAL_NOT_MET
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, then train (or resume) every seed; see the module docstring for exit codes.

    Only the environment id given as ``--env`` may import a module of its own (``mymodule:MyEnv``): one that a
    ``--config`` file or a resumed run records is refused unless ``--env`` names it too."""
    args = [SHORT_FLAGS.get(a, a) for a in (sys.argv[1:] if argv is None else argv)]
    with named_ids_only([_flag_value(args, "--env"), _flag_value(args, "--eval-env")]):
        return quiet_broken_pipe(_main)(args)


if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
