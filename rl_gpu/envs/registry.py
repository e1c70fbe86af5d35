"""Environment ids → environment classes (any :class:`~rl_gpu.core.types.VecEnv`: a
:class:`~rl_gpu.envs.base.TensorEnv`, a host-stepped or engine-backed one), and ``make`` to build a batch by id.

Classes are registered as ``"module:ClassName"`` strings and imported on first use, so importing the registry
does not import every environment (and environment modules may import the registry without a cycle).

An id resolves, in this order, as: a registered id; a prefixed family (``"gym:<Gymnasium id>"``,
:data:`PREFIXES`); an entry point ``"package.module:ClassName"`` (the module is imported, nothing needs
registering); a name that an installed distribution declares in the ``rl_gpu.envs`` entry-point group::

    [project.entry-points."rl_gpu.envs"]
    MyEnv-v0 = "my_package.envs:MyEnv"

The declared names are read once, on the first id that is none of the others, never by ``import rl_gpu``.

**Which ids may import code.** A registered or declared id imports only code that was installed or registered
on purpose. An entry point (and a ``gym:`` id naming a module, ``"gym:package.module:Id-v0"``) imports the module
it names: inside :func:`named_ids_only` (what every ``rl-gpu`` command runs in) only the ids its user named on the
command line may, so an id read from a file (a checkpoint, a saved configuration) is data and never imports
anything by itself (:func:`check_may_import`). Python code that calls :func:`make` names its ids itself.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.core.types import VecEnv

_registry: dict[str, type | str] = {}
_imported: dict[str, type] = {}
_declared_read = False

ENTRY_POINT_GROUP = "rl_gpu.envs"
"""The entry-point group an installed distribution declares environment ids in (``id = "module:Class"``)."""

_ENTRY_POINT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

PREFIXES: dict[str, str] = {"gym:": "rl_gpu.envs.gymnasium_env:GymnasiumEnv", "vmas:": "rl_gpu.envs.vmas_env:VmasEnv",
                            "pettingzoo:": "rl_gpu.envs.pettingzoo_env:PettingZooModuleEnv",
                            "multitask:": "rl_gpu.envs.multitask:MultiTaskEnv",
                            "metaworld:": "rl_gpu.envs.metaworld_env:MetaWorldEnv",
                            "multitask-noid:": "rl_gpu.envs.multitask:BlindMultiTaskEnv"}
"""Id prefixes that name a family of environments rather than one id: ``"gym:<any Gymnasium id>"`` builds
``GymnasiumEnv("<id>", num_envs, device=..., seed=..., max_episode_steps=..., **kwargs)``, ``"vmas:<scenario>"``
builds :class:`~rl_gpu.envs.vmas_env.VmasEnv` the same way, ``"pettingzoo:<module>"`` the ``parallel_env`` of a
module (:class:`~rl_gpu.envs.pettingzoo_env.PettingZooModuleEnv`; the module is imported, so the id imports code),
``"multitask:A|B|..."`` several tensor-env tasks in the rows of one batch (:mod:`rl_gpu.envs.multitask`)."""
FAMILIES = ("gym:<any Gymnasium id>, vmas:<any VMAS scenario>, pettingzoo:<module with a parallel_env>, "
            "multitask:<id>|<id>|..., metaworld:<MT10|MT50|task>")
MULTITASK = ("multitask:", "multitask-noid:")
"""How the prefixed families are named in messages."""


def _prefixed(env_id: object) -> tuple[str, str] | None:
    """``(entry point, rest of the id)`` when ``env_id`` starts with a registered prefix."""
    if isinstance(env_id, str):
        for prefix, entry in PREFIXES.items():
            if env_id.startswith(prefix) and len(env_id) > len(prefix):
                return entry, env_id[len(prefix):]
    return None


def is_entry_point(env_id: object) -> bool:
    """True when ``env_id`` has the form ``"package.module:ClassName"`` (dotted identifiers on both sides);
    a prefixed id such as ``"gym:CartPole-v1"`` is not one."""
    return isinstance(env_id, str) and _prefixed(env_id) is None and bool(_ENTRY_POINT.fullmatch(env_id))


class UntrustedEnvError(UsageError):
    """An environment id read from a file would import a module that the user did not name."""


_named: frozenset[str] | None = None
"""Inside :func:`named_ids_only`: the ids that may import a module. None: every id may."""

_OWN_PACKAGE = __name__.split(".")[0]


def module_to_import(env_id: object) -> str | None:
    """The module that building ``env_id`` would import beyond the registry's own entries: ``"pkg.mod"`` for
    ``"pkg.mod:Class"`` and for ``"gym:pkg.mod:Id-v0"`` (Gymnasium imports the module before the id), else
    None (registered and declared ids, plain ``gym:`` ids, rl_gpu's own modules, malformed ids)."""
    if not isinstance(env_id, str) or env_id in _registry:
        return None
    env_id = _unwrapped_id(env_id)
    prefixed = _prefixed(env_id)
    if prefixed is not None and env_id.startswith(MULTITASK):  # the first of its tasks that imports a module
        tasks = (part.rpartition("@")[0] if "@" in part else part for part in prefixed[1].split("|"))
        return next((m for m in map(module_to_import, tasks) if m is not None), None)
    if prefixed is not None and prefixed[0] == PREFIXES["pettingzoo:"]:
        module = prefixed[1].partition("?")[0]
    elif prefixed is not None:
        name = prefixed[1].partition("?")[0]
        module = name.split(":", 1)[0] if ":" in name else None
    elif is_entry_point(env_id):
        module = env_id.split(":", 1)[0]
    else:
        return None
    if module is None or module == _OWN_PACKAGE or module.startswith(_OWN_PACKAGE + "."):
        return None
    return module


@contextlib.contextmanager
def named_ids_only(named: Iterable[str | None] = ()) -> Iterator[None]:
    """Within the block, an id that would import a module (:func:`module_to_import`) is built only when it is
    one of ``named`` (the ids the user typed: ``--env``, ``--trust-env``); any other is refused with
    :class:`UntrustedEnvError` before anything is imported. Blocks nest: an inner one narrows nothing, it adds
    its ids."""
    global _named
    saved = _named
    _named = frozenset(n for n in named if isinstance(n, str)) | (saved or frozenset())
    try:
        yield
    finally:
        _named = saved


def _where(module: str) -> str:
    """Where ``module`` would be imported from, found without running it (only a top-level module is looked up:
    finding ``a.b`` would import ``a``)."""
    top = module.split(".")[0]
    try:
        with _cwd_on_path():
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    return f" ({origin})" if isinstance(origin, str) and os.path.isabs(origin) else ""


def check_may_import(env_id: object, source: str = "", flag: str = "--env") -> None:
    """Refuse ``env_id`` (read from ``source``: a checkpoint, a saved configuration) when building it would
    import a module the user did not name (inside :func:`named_ids_only`; outside it, nobody named any): one
    :class:`UntrustedEnvError` line naming the module, where it lies and ``flag``, the way to allow it.
    Nothing is imported."""
    module = module_to_import(env_id)
    if module is None or (_named is not None and env_id in _named):
        return
    recorded = f"{source} records environment {env_id!r}" if source else f"environment {env_id!r}"
    raise UntrustedEnvError(
        f"{recorded}, and building it would import the module {module!r}{_where(module)}, which may run any "
        f"code; an environment id read from a file is not imported unless you name it: if you trust that module, "
        f"pass {flag} {env_id}")


def _guard(env_id: str) -> None:
    """Inside :func:`named_ids_only`, refuse an id that would import a module nobody named."""
    if _named is not None:
        check_may_import(env_id, flag="--env (or --trust-env, for a checkpoint)")


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The current directory on ``sys.path`` while a named module is imported: the ``rl-gpu`` console script
    (and ``python -m rl_gpu``, which drops it at start so that files lying in the directory shadow nothing)
    finds ``--env mymodule:MyEnv`` in the directory it runs in, as ``python -c`` would."""
    cwd = os.getcwd()
    if any(os.path.abspath(p or ".") == cwd for p in sys.path):
        yield
        return
    sys.path.append(cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


def _load(entry: str):
    module_name, class_name = entry.split(":")
    obj = importlib.import_module(module_name)
    for name in class_name.split("."):
        obj = getattr(obj, name)
    return obj


def _load_entry_point(entry: str, what: str) -> type:
    """Import ``entry`` (``"module:Class"``) for ``what`` and check that it is an environment class; every
    failure is one :class:`~rl_gpu.core.errors.UsageError` line naming what went wrong."""
    module_name, class_name = entry.split(":")
    try:
        with _cwd_on_path():
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"{what}: cannot import module {module_name!r} ({_one_line(e)}); an id with ':' "
                         "names an environment class as 'package.module:ClassName' importable from sys.path"
                         ) from e
    except Exception as e:  # the module itself is broken (SyntaxError, an error raised at its import)
        raise UsageError(f"{what}: importing module {module_name!r} failed: {type(e).__name__}: "
                         f"{_one_line(e)}") from e
    obj: Any = module
    for name in class_name.split("."):
        if not hasattr(obj, name):
            raise UsageError(f"{what}: module {module_name!r} has no attribute {class_name!r}")
        obj = getattr(obj, name)
    try:
        _check_env_class(obj, what)
    except TypeError as e:
        raise UsageError(str(e)) from None
    return obj


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _read_declared() -> None:
    """Register, once, every id that installed distributions declare in :data:`ENTRY_POINT_GROUP` (ids
    already registered win; a name declared twice keeps its first declaration)."""
    global _declared_read
    if _declared_read:
        return
    _declared_read = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        target = f"{ep.module}:{ep.attr}"
        if ep.name and ep.name not in _registry and is_entry_point(target):
            _registry[ep.name] = target


PROTOCOL_MEMBERS = ("spec", "reset", "reset_rows", "step", "observe", "state_dict", "load_state_dict", "close")
"""What a registered class must define: the :class:`~rl_gpu.core.types.VecEnv` protocol."""


def _check_env_class(cls: object, what: str) -> None:
    """Refuse, at the boundary, a class that does not implement the environment protocol."""
    if not isinstance(cls, type):
        raise TypeError(f"{what} is a {type(cls).__name__}, not an environment class (a VecEnv such as a "
                        "TensorEnv subclass)")
    missing = [m for m in PROTOCOL_MEMBERS if m not in dir(cls)]
    if missing:
        raise TypeError(f"{what} is not an environment class (a VecEnv such as a TensorEnv subclass): "
                        f"missing {', '.join(missing)}")


def register(env_id: str, cls: type | str, *, override: bool = False) -> None:
    """Register ``cls`` (an environment class built as ``cls(num_envs, device=, seed=, **kwargs)``, or
    ``"package.module:ClassName"`` imported lazily) as ``env_id``. Re-registering an id raises ``ValueError``
    unless ``override`` is True."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string, got {env_id!r}")
    if isinstance(cls, str):
        if not is_entry_point(cls):
            raise ValueError(f"entry point must look like 'package.module:ClassName', got {cls!r}")
    else:
        _check_env_class(cls, f"cls {cls!r}")
    if env_id in _registry and not override and _registry[env_id] != cls:
        raise ValueError(f"{env_id!r} is already registered to {_registry[env_id]!r}; pass override=True")
    _registry[env_id] = cls
    _imported.pop(env_id, None)


def registered_ids() -> tuple[str, ...]:
    """Every registered id (those installed distributions declare included), sorted."""
    _read_declared()
    return tuple(sorted(_registry))


def _unwrapped_id(env_id: str) -> str:
    """``env_id`` without the observation wrappers of its query (:mod:`rl_gpu.envs.wrappers`); a prefixed id's
    query is its family's and stays."""
    return env_id if _prefixed(env_id) is not None else env_id.split("?", 1)[0]


def is_known(env_id: str) -> bool:
    """True for a registered id, an id installed distributions declare (:data:`ENTRY_POINT_GROUP`), a
    prefixed id (``"gym:..."``) or an entry point ``"package.module:ClassName"``. As for ``gym:`` ids, an
    entry point's module is only imported when it is built: :func:`make` then says precisely what is wrong
    (the module cannot be imported, has no such class, or the class is not an environment)."""
    if not isinstance(env_id, str):
        return False
    env_id = _unwrapped_id(env_id)
    if env_id in _registry or _prefixed(env_id) is not None or is_entry_point(env_id):
        return True
    _read_declared()
    return env_id in _registry


def env_class(env_id: str) -> type:
    """The class registered as ``env_id`` (importing it if registered by name); for a prefixed id such as
    ``"gym:CartPole-v1"``, the class of its family (:data:`PREFIXES`); for ``"package.module:ClassName"``,
    that class. An id that resolves to nothing, a module that cannot be imported or a class that is not an
    environment raise :class:`~rl_gpu.core.errors.UsageError` (a ``ValueError``) in one line."""
    prefixed = _prefixed(env_id)
    if prefixed is not None:
        from rl_gpu.envs.wrappers import refuse_wrappers

        if not env_id.startswith(MULTITASK):  # its tasks' queries are their own
            refuse_wrappers(env_id)
        _guard(env_id)
        return _load(prefixed[0])
    if isinstance(env_id, str) and "?" in env_id:
        from rl_gpu.envs.wrappers import split_wrappers, with_params, wrapped_class

        _guard(env_id)
        base, wrapping, params = split_wrappers(env_id)
        with named_ids_only([base]):  # the wrapped id was allowed (or named) as a whole
            cls = env_class(base)
        if params:
            cls = with_params(cls, env_id, params)
        if wrapping is not None and wrapping.seats_as_agents:
            from rl_gpu.envs.seat_agents import seat_agents_class

            return seat_agents_class(cls, env_id)
        return cls if wrapping is None else wrapped_class(cls, env_id, wrapping)
    if isinstance(env_id, str) and env_id not in _registry:
        if is_entry_point(env_id):
            _guard(env_id)
            return _load_entry_point(env_id, f"environment {env_id!r}")
        _read_declared()
    try:
        cls = _registry[env_id]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(env_id), _registry, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UsageError(
            f"unknown environment id {env_id!r}.{hint} "
            f"Registered ids: {', '.join(registered_ids())}, {FAMILIES}, or 'package.module:ClassName'"
        ) from None
    if isinstance(cls, type):
        return cls
    if env_id not in _imported:
        _imported[env_id] = _load_entry_point(cls, f"environment {env_id!r} (registered as {cls!r})")
    return _imported[env_id]


def make(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    *,
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> VecEnv:
    """Build ``num_envs`` environments of type ``env_id`` on ``device``.

    ``kwargs`` go to the class (``autoreset``, ``validate_actions``, and environment parameters such as
    ``g`` for Pendulum-v1, as ``gymnasium.make`` takes them). ``max_episode_steps`` replaces the class's time
    limit for this instance. Unknown ids raise ``ValueError`` listing the registered ones. ``"gym:<id>"``
    wraps Gymnasium's ``<id>`` (:class:`rl_gpu.envs.gymnasium_env.GymnasiumEnv`; ``kwargs`` go to it).
    ``"package.module:ClassName"`` imports that module and builds that class, so your own environment needs
    no registering; a checkpoint records the id as given, and ``rl-gpu evaluate`` / ``export`` build it again
    wherever the module is importable.
    """
    cls = env_class(env_id)
    steps = max_episode_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
        raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
    prefixed = _prefixed(env_id)
    if prefixed is not None:
        # Gymnasium imports the module of a "module:Id" id itself (the guard above allowed it).
        with _cwd_on_path() if module_to_import(env_id) else contextlib.nullcontext():
            return cls(
                prefixed[1], num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps, **kwargs
            )
    env = cls(num_envs, device=device, seed=seed, **kwargs)
    if max_episode_steps is not None:
        env.max_episode_steps = max_episode_steps
    return env


register("CartPole-v1", "rl_gpu.envs.cartpole:CartPoleEnv")
register("Acrobot-v1", "rl_gpu.envs.acrobot:AcrobotEnv")
register("MountainCar-v0", "rl_gpu.envs.mountain_car:MountainCarEnv")
register("MountainCarContinuous-v0", "rl_gpu.envs.mountain_car:MountainCarContinuousEnv")
register("Pendulum-v1", "rl_gpu.envs.pendulum:PendulumEnv")
register("CartPoleNoVel-v1", "rl_gpu.envs.cartpole:CartPoleNoVelEnv")
register("PendulumNoVel-v1", "rl_gpu.envs.pendulum:PendulumNoVelEnv")
register("RussianRoulette-v0", "rl_gpu.envs.roulette:RussianRouletteVectorized")
register("LeducHoldem-v0", "rl_gpu.envs.leduc:LeducHoldem")
register("MinAtar-Breakout-v1", "rl_gpu.envs.minatar.breakout:BreakoutEnv")
register("MinAtar-SpaceInvaders-v1", "rl_gpu.envs.minatar.space_invaders:SpaceInvadersEnv")
register("Addition-v0", "rl_gpu.envs.text.addition:AdditionEnv")
register("MinAtar-Freeway-v1", "rl_gpu.envs.minatar.freeway:FreewayEnv")
register("MinAtar-Asterix-v1", "rl_gpu.envs.minatar.asterix:AsterixEnv")
register("MinAtar-Seaquest-v1", "rl_gpu.envs.minatar.seaquest:SeaquestEnv")
register("HalfCheetah-v5", "rl_gpu.envs.mujoco.locomotion:HalfCheetahEnv")
register("Hopper-v5", "rl_gpu.envs.mujoco.locomotion:HopperEnv")
register("Walker2d-v5", "rl_gpu.envs.mujoco.locomotion:Walker2dEnv")
register("Ant-v5", "rl_gpu.envs.mujoco.locomotion3d:AntEnv")
register("Humanoid-v5", "rl_gpu.envs.mujoco.locomotion3d:HumanoidEnv")
register("Go1-Velocity-v0", "rl_gpu.envs.mujoco.quadruped:Go1VelocityEnv")
register("Go1-Rough-v0", "rl_gpu.envs.mujoco.rough:Go1RoughEnv")
register("PandaPickCube-v0", "rl_gpu.envs.mujoco.manipulation:PandaPickCubeEnv")
register("PandaReach-v0", "rl_gpu.envs.mujoco.manipulation:PandaReachEnv")
