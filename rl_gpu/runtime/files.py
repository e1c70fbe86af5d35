"""Writing the tool's files without damaging anything else: atomic replacement, and refusing targets that are
not ours to replace.

Every file rl_gpu writes (checkpoints, JSON, figures, exported models) goes through
:func:`atomic_write_bytes`:

- the target must be a regular file or not exist yet: a directory, a device node such as ``/dev/null``, a FIFO
  or a socket is never replaced by the rename;
- a symbolic link is followed only when it points inside the folder being written in (the file it points to is
  replaced and the link kept); one leading elsewhere is refused;
- a read-only file is not replaced, and neither is a file the command reads (an output named like its input);
- a failure (permission, read-only file system, disk full, a parent that is a file) becomes one
  :class:`FileWriteError` line, the temporary file is removed and the previous file is left as it was.

Files are created with mode ``0o644 & ~umask``, as ``open()`` with mode ``0o644`` would (the metrics file is
opened that way), so every file of a run has the same permissions.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rl_gpu.core.errors import UsageError

FILE_MODE = 0o644
"""Permissions of every file the tool writes, before the umask."""


class FileWriteError(UsageError, OSError):
    """A file could not be written, or writing it would replace something that is not the tool's to replace.

    One line naming the path and the reason (exit code 2 on the command line); the previous file is intact."""


def current_umask() -> int:
    """The process's umask, read without changing it (``/proc`` on Linux; elsewhere set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode new files get: :data:`FILE_MODE` less the umask."""
    return FILE_MODE & ~current_umask()


def describe_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words, for error messages."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


def reason(error: OSError) -> str:
    """The short reason of an ``OSError`` (``No space left on device``), without errno tuples."""
    text = error.strerror or str(error) or type(error).__name__
    return " ".join(str(text).split())


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` (itself excluded) that exists."""
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    return parent


def check_writable(path: str | Path, inputs: Sequence[str | Path] = ()) -> Path:
    """Refuse (with :class:`FileWriteError`) to write ``path`` when that would replace something that is not a
    file of ours; returns the file to replace (``path``, or where a symbolic link inside its folder points).

    ``inputs`` are files the command reads: writing over one of them (the same file under any name, hard links
    and symbolic links included) is refused. Nothing is created or changed.
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise FileWriteError(f"{path}: not a file name")
    ancestor = _existing_ancestor(path)
    if not ancestor.is_dir():
        raise FileWriteError(f"{path}: cannot be written, {ancestor} is not a directory")
    target, st = path, _lstat(path)
    if st is not None and stat.S_ISLNK(st.st_mode):
        real = Path(os.path.realpath(path))
        folder = Path(os.path.realpath(path.parent))
        if not real.is_relative_to(folder) or real == folder:
            raise FileWriteError(f"{path}: a symbolic link to {real}, outside {folder}; refusing to write "
                                 "through it (remove the link or choose another path)")
        target = real
        try:
            st = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as e:
            raise FileWriteError(f"{path}: cannot follow the symbolic link ({reason(e)})") from None
        if st is None and not _existing_ancestor(real).is_dir():
            raise FileWriteError(f"{path}: a symbolic link to {real}, whose folder is not a directory")
    if st is None:
        return target
    if not stat.S_ISREG(st.st_mode):
        raise FileWriteError(f"{path}: exists and is a {describe_kind(st.st_mode)}, not a regular file; "
                             "rl-gpu only replaces files (choose another path)")
    if not st.st_mode & 0o222:
        raise FileWriteError(f"{path}: the file is read-only; refusing to replace it (choose another path)")
    for source in inputs:
        try:
            same = os.path.samefile(target, source)
        except OSError:
            same = False
        if same:
            raise FileWriteError(f"{path}: is the input {source}; refusing to write over it (choose another "
                                 "output path)")
    return target


def check_output(path: str | Path, inputs: Sequence[str | Path] = ()) -> Path:
    """:func:`check_writable` for what a command other than ``train`` writes (an export, a report, a figure, a
    video, benchmark results): a run's own files are refused too (its checkpoints, configuration, metrics,
    summary, TensorBoard events, and anything inside a run folder a live process is training:
    :func:`rl_gpu.runtime.run_files.run_file_reason`)."""
    from rl_gpu.runtime.run_files import run_file_reason

    why = run_file_reason(path)
    if why is not None:
        raise FileWriteError(f"{path}: refusing to write there, {why}; choose another path")
    return check_writable(path, inputs)


def check_database_file(path: str | Path, what: str) -> Path:
    """Refuse (with :class:`FileWriteError`, naming ``what``: the flag and its value) a database file that would be
    written in place through a symbolic link, or that is a folder or a special file, or whose folder does not
    exist; returns the path. A database is changed where it lies, so :func:`check_writable`'s link rule (a link
    inside its own folder is replaced) does not apply: no link at all."""
    path = Path(path).expanduser()
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FileWriteError(f"{what}: {path} is a {describe_kind(st.st_mode)}; give a regular file (or a new one)")
    if not path.parent.is_dir():
        raise FileWriteError(f"{what}: {path.parent} is not an existing folder")
    return path


def atomic_write_bytes(path: str | Path, data: bytes, inputs: Sequence[str | Path] = ()) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one, never a mix.

    :func:`check_writable` first (``inputs``: files the command reads, never written over). The bytes go to a
    temporary file in the same directory, are flushed and fsynced, and the file is renamed over the target
    (atomic on POSIX); the directory is fsynced so the rename itself survives a power loss. Any ``OSError``
    becomes a :class:`FileWriteError` and leaves the previous file as it was.
    """
    path = Path(path)
    target = check_writable(path, inputs)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FileWriteError(f"{path}: cannot create its folder {target.parent} ({reason(e)})") from None
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            try:
                os.fchmod(f.fileno(), file_mode())
            except OSError:
                pass  # a file system without POSIX modes (FAT, some network mounts) keeps its own
            os.fsync(f.fileno())
        # Checked again just before the rename: the target may have changed while the data was written.
        check_writable(path, inputs)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        if isinstance(e, FileWriteError):
            raise
        raise FileWriteError(f"{path}: cannot write ({reason(e)}); the previous file, if any, is unchanged") \
            from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        # The new file is in place and complete; some file systems cannot fsync a directory, and then only the
        # rename's durability across a power loss is left to the file system.
        pass


def atomic_write_json(path: str | Path, obj: Any, inputs: Sequence[str | Path] = ()) -> None:
    """:func:`atomic_write_bytes` of pretty-printed JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), inputs)


MAX_JSON_BYTES = 16 * 2**20
"""Largest JSON file rl_gpu reads as settings or a run's record (a config.json is a few kilobytes)."""


class JsonReadError(ValueError):
    """A JSON file that cannot be read as one (a one-line reason)."""


def read_json(path: str | Path, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in ``path``, read within limits: a file over ``limit`` bytes is refused before it is read,
    and numbers of thousands of digits or nesting thousands deep are refused, not a traceback
    (:class:`JsonReadError`, one line)."""
    path = Path(path)
    try:
        size = os.stat(path).st_size
        if size > limit:
            raise JsonReadError(f"{path}: {size:,} bytes, over the {limit:,} a settings file may have")
        text = path.read_bytes().decode("utf-8")
        return json.loads(text)
    except OSError as e:
        raise JsonReadError(f"{path}: cannot read it ({reason(e)})") from None
    except UnicodeDecodeError:
        raise JsonReadError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise JsonReadError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise JsonReadError(f"{path}: nested too deeply to be settings") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise JsonReadError(f"{path}: {str(e).splitlines()[0]}") from None
