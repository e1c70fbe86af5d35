"""Command-line plumbing shared by the subcommands: typed parsing with tyro, one-line errors, ``--version``,
and a quiet exit when the reader of stdout goes away (``rl-gpu --help | head -1``)."""

from __future__ import annotations

import contextlib
import functools
from decimal import Decimal, InvalidOperation
import io
import json
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import tyro
from tyro.constructors import ConstructorRegistry, PrimitiveConstructorSpec

from rl_gpu.core.errors import UsageError

T = TypeVar("T")

BOX_CHARS = "│╭╮╰╯─┃━┏┓┗┛"
_RULE = re.compile(r"^[-─━]{3,}$")
_TYRO_PREFIX = re.compile(r"^Error parsing [A-Za-z_][\w.]*: ")


def _first_message(text: str) -> str:
    """The first paragraph of tyro's error text, joined into one line. tyro draws a box (Unicode when stdout is
    UTF-8: the message on ``│`` lines) or, otherwise, a title line, a rule of dashes, then the message."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    raw_lines = [line.strip() for line in text.splitlines() if line.strip()]
    boxed = [line.strip(BOX_CHARS + " ") for line in raw_lines if line.startswith(("│", "┃"))]
    if boxed:
        lines = boxed
    else:
        rule = next((i for i, line in enumerate(raw_lines) if _RULE.match(line)), None)
        lines = raw_lines[rule + 1:] if rule is not None else raw_lines
    paragraph: list[str] = []
    for line in lines:
        if not line or _RULE.match(line) or set(line) <= set(BOX_CHARS + " "):
            if paragraph:
                break
            continue
        if line.lower().startswith(("usage:", "for full helptext", "argument helptext")):
            if paragraph:
                break
            continue
        paragraph.append(line)
    if not paragraph:
        return "invalid arguments"
    # A configuration's own check (its __post_init__) already names the flag: drop tyro's "Error parsing
    # TrainConfig: " but keep "Error parsing --num-envs: ".
    return _TYRO_PREFIX.sub("", " ".join(paragraph))


_METAVARS = {int: "INT", float: "FLOAT", str: "STR", Path: "PATH"}

REGISTRY = ConstructorRegistry()
"""tyro rules of this package's commands (integers, and the optional scalars below)."""


def whole_number(text: str) -> int:
    """An integer flag's value: ``1000000``, or a whole number written with an exponent or a point (``1e6``,
    ``2.5e5``, ``300000.0``: what an SB3 user types for a step budget). Anything else (``1.5``, ``nan``, ``1e999``)
    is a ``ValueError``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{text!r} is not an integer") from None
    if not number.is_finite() or number.adjusted() > 30 or number != number.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    return int(number)


@REGISTRY.primitive_rule
def _integer(info):
    """``int`` flags take whole numbers written with an exponent too (:func:`whole_number`)."""
    if info.type is not int:
        return None
    return PrimitiveConstructorSpec(
        nargs=1, metavar="INT", instance_from_str=lambda strings: whole_number(strings[0]),
        is_instance=lambda x: isinstance(x, int) and not isinstance(x, bool), str_from_instance=lambda x: [str(x)],
    )


@REGISTRY.primitive_rule
def _optional_scalar(info):
    """``int | None`` (and float, str, Path) as one flag shown ``--flag INT`` rather than tyro's
    ``--flag {None}|INT``; ``None`` (or ``none``) on the command line still means no value."""
    args = typing.get_args(info.type)
    if typing.get_origin(info.type) not in (typing.Union, types.UnionType) or len(args) != 2 \
            or type(None) not in args:
        return None
    (inner,) = [a for a in args if a is not type(None)]
    if inner not in _METAVARS:
        return None

    def from_strings(strings: list[str]):
        (text,) = strings
        if text in ("None", "none"):
            return None
        return whole_number(text) if inner is int else inner(text)

    return PrimitiveConstructorSpec(
        nargs=1, metavar=_METAVARS[inner], instance_from_str=from_strings,
        is_instance=lambda x: x is None or (isinstance(x, inner) and not isinstance(x, bool)),
        str_from_instance=lambda x: [str(x)],
    )


def version_text() -> str:
    """What ``--version`` prints."""
    from rl_gpu import __version__

    return f"rl-gpu {__version__}"


def quiet_broken_pipe(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a command's ``main`` so that a closed stdout (``| head -1``) ends it quietly with 141 (128 + SIGPIPE,
    what a shell reports for a tool killed by the closed pipe) instead of a ``BrokenPipeError`` traceback."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()  # also after --help's SystemExit: the write that fails may be this one
        except BrokenPipeError:
            # Python flushes stdout once more at exit; point it at /dev/null so that flush cannot fail too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
    return wrapped


def flag_as_positional(argv: Sequence[str] | None, flag: str, prog: str) -> list[str]:
    """``argv`` (None: this process's arguments) with ``flag VALUE`` and ``flag=VALUE`` written as the positional
    ``VALUE``: what lets a command whose argument is positional (``rl-gpu evaluate RUN/best.pt``) also take it as
    a flag. A value that starts with ``-`` goes after ``--``, where it cannot be read as a flag; ``flag`` with no
    value (last, empty, or followed by another ``--`` option) exits 2 saying so."""
    args = list(sys.argv[1:] if argv is None else argv)
    out: list[str] = []
    dashed: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        if arg == flag:
            if i + 1 == len(args) or args[i + 1].startswith("--"):
                fail(prog, f"{flag} needs a value")
            value, i = args[i + 1], i + 2
        elif arg.startswith(flag + "="):
            value, i = arg[len(flag) + 1:], i + 1
        else:
            out.append(arg)
            i += 1
            continue
        if not value:
            fail(prog, f"{flag} needs a value")
        (dashed if value.startswith("-") else out).append(value)
    if dashed:
        out.extend(["--", *dashed] if "--" not in out else dashed)
    return out


def parse(cls: Callable[..., T], prog: str, args: Sequence[str] | None, default: T | None = None,
          description: str | None = None) -> T:
    """Parse ``args`` into ``cls`` with tyro. ``--help`` prints and exits 0; any bad flag or value, and any
    ``ValueError`` raised by the config's own validation, exits 2 with a one-line error."""
    kwargs = {"default": default} if default is not None else {}

    def attempt(columns: str | None):
        stderr = io.StringIO()
        saved = os.environ.get("COLUMNS")
        if columns is not None:
            os.environ["COLUMNS"] = columns
        try:
            with contextlib.redirect_stderr(stderr):
                return tyro.cli(cls, prog=prog, args=args, description=description,
                                config=(tyro.conf.OmitArgPrefixes,), registry=REGISTRY, **kwargs)
        except SystemExit as e:
            if e.code in (0, None):
                raise
            return stderr.getvalue()
        finally:
            if columns is not None:
                if saved is None:
                    os.environ.pop("COLUMNS", None)
                else:
                    os.environ["COLUMNS"] = saved

    # A refusal is read from a console too wide to wrap its message, so it joins into one line without breaks
    # inside numbers or paths; --help is printed at the console's own width.
    words = sys.argv[1:] if args is None else args
    wants_help = any(str(a) in ("-h", "--help") for a in words)
    try:
        out = attempt(None if wants_help else "100000")
        if isinstance(out, str):
            fail(prog, f"{_first_message(out)} (see {prog} --help)")
        return out
    except ValueError as e:
        fail(prog, str(e))
    raise AssertionError("unreachable")


def fail(prog: str, message: str, code: int = 2) -> None:
    """Print ``prog: error: message`` on one line to stderr and exit with ``code``. Under torchrun only rank 0
    prints (every rank refuses alike: K copies of one line, interleaved, would read as one garbled line)."""
    message = " ".join(str(message).split())
    # A value of thousands of characters (a 5000-digit number) is shown by its start and its length.
    message = re.sub(r"\S{201,}", lambda m: f"{m.group(0)[:32]}... ({len(m.group(0)):,} characters)", message)
    if not other_rank():
        print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def other_rank() -> bool:
    """Whether this process is a torchrun worker other than rank 0 (read from torchrun's environment, which is
    set before any process group exists)."""
    return "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("RANK", "0") != "0"


def check_trusted_env(env_id: object, checkpoint: Path, trust_env: str | None) -> None:
    """Refuse to build a checkpoint's recorded ``env_id`` when that would import a module (``mymodule:MyEnv``)
    that ``--trust-env`` does not name; a ``--trust-env`` naming another id than the recorded one is refused
    too (it would allow nothing). One :class:`~rl_gpu.core.errors.UsageError` line; nothing is imported."""
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.registry import check_may_import

    if trust_env is not None and trust_env != env_id:
        raise UsageError(f"--trust-env {trust_env!r} is not the environment {checkpoint} records ({env_id!r}); "
                         "it names that recorded id, to allow importing its module")
    check_may_import(env_id, str(checkpoint), "--trust-env")



def settings_of(items: Sequence[str], flag: str) -> dict:
    """``NAME=VALUE`` items (a command's ``--fixed``) as ``rl_gpu.train`` overrides: VALUE read as JSON (a list
    becomes a tuple), else kept as text."""
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"{flag} {item!r}: give NAME=VALUE, such as num_envs=64")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def run_command(cls: Callable[..., T], prog: str, argv: Sequence[str] | None, run: Callable[[T], int],
                interrupted: Callable[[T], str]) -> int:
    """A command's main: parse ``argv`` into ``cls``, ``run`` it; a :class:`UsageError` is one line and exit code 2,
    Ctrl-C is ``interrupted(cfg)`` on stderr and exit code 130."""
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(cls, prog, args)
    try:
        return run(cfg)
    except UsageError as e:
        fail(prog, str(e))
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted(cfg)}", file=sys.stderr)
        return 130
    return 0
