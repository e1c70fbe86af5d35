"""Command-line plumbing shared by the subcommands: typed parsing with tyro, and one-line errors."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from typing import Callable, Sequence, TypeVar

import tyro

T = TypeVar("T")

BOX_CHARS = "│╭╮╰╯─┃━┏┓┗┛"


def _first_message(text: str) -> str:
    """The first paragraph of tyro's error text (inside its box, if it drew one), joined into one line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    raw_lines = [line.strip() for line in text.splitlines() if line.strip()]
    boxed = [line for line in raw_lines if line.startswith(("│", "┃"))]
    paragraph: list[str] = []
    for raw in boxed or raw_lines:
        line = raw.strip(BOX_CHARS + " ")
        if not line or set(line) <= set(BOX_CHARS + " "):
            if paragraph:
                break
            continue
        if line.lower().startswith(("usage:", "for full helptext", "argument helptext")):
            if paragraph:
                break
            continue
        paragraph.append(line)
    return " ".join(paragraph) if paragraph else "invalid arguments"


def parse(cls: Callable[..., T], prog: str, args: Sequence[str] | None, default: T | None = None,
          description: str | None = None) -> T:
    """Parse ``args`` into ``cls`` with tyro. ``--help`` prints and exits 0; any bad flag or value, and any
    ``ValueError`` raised by the config's own validation, exits 2 with a one-line error."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            kwargs = {"default": default} if default is not None else {}
            return tyro.cli(cls, prog=prog, args=args, description=description,
                            config=(tyro.conf.OmitArgPrefixes,), **kwargs)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        fail(prog, f"{_first_message(stderr.getvalue())} (see {prog} --help)")
    except ValueError as e:
        fail(prog, str(e))
    raise AssertionError("unreachable")


def fail(prog: str, message: str, code: int = 2) -> None:
    """Print ``prog: error: message`` on one line to stderr and exit with ``code``."""
    message = " ".join(str(message).split())
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(code)
