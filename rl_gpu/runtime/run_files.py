"""A run folder's files, and the lock that gives it to one process at a time.

A run folder (``OUTPUT/seed-N``) holds the files :data:`RUN_FILES` and the ``tb/`` folder; only the run itself
writes them. Every ``rl-gpu train`` (fresh, ``--resume``, ``--overwrite``; rank 0 under torchrun) holds the
folder's :class:`RunLock` for the run's whole life, so a second process refuses in one line naming the holder,
and other commands (export, evaluate, bench, plot) never write over a run's files (:func:`run_file_reason`).

The lock is an advisory ``flock`` on :data:`LOCK_FILE` in the folder: the kernel drops it when its process
ends, however it ends. The holder's description (process id, host, command, start time) is written in the file
and cleared when the run ends cleanly, so a description left behind names a holder that died: the next run takes
the lock over, with a note.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rl_gpu.core.errors import UsageError

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "best.pt", "last.pt", "ratings.json")
"""Every file a run writes (besides the ``tb/`` folder); ``--overwrite`` removes these and nothing else."""
TB_DIR = "tb"
LOCK_FILE = ".rl_gpu.lock"
"""The lock file of a run folder (kept between runs; ``--overwrite`` leaves it, and it counts as no content)."""
OUTPUT_FILES = ("summary.json", "pbt.json")
"""Files ``train`` writes beside the seeds' folders of a multi-seed ``--output``."""


class RunLockedError(UsageError):
    """Another live process holds the run folder's lock (the message names it, on one line)."""


def reason_of(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor of ``path``, refused (``OSError``) unless it is a regular file: never through a symbolic link,
    and without blocking on a FIFO."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def is_run_dir(folder: Path) -> bool:
    """Whether ``folder`` is a run folder: it holds a run's configuration, checkpoint or lock."""
    return any(os.path.isfile(folder / name) for name in ("config.json", "last.pt", LOCK_FILE))


def _holder_text(path: Path) -> str:
    try:
        data = json.loads(path.read_text()[:4096] or "{}")
    except (OSError, ValueError):
        return "another process"
    if not isinstance(data, dict):
        return "another process"
    pid, host, since = data.get("pid"), data.get("host"), data.get("started")
    command = str(data.get("command", ""))[:200]
    return (f"process {pid} on {host}" + (f" ({command})" if command else "")
            + (f", since {since}" if since else ""))


def live_holder(folder: Path) -> str | None:
    """The description of the live process holding ``folder``'s lock, or None when no process holds it."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_text(path)
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the shared lock taken to test
    return None


def run_file_reason(path: str | Path) -> str | None:
    """Why a command other than the run itself must not write ``path``: one of a run folder's files, inside its
    ``tb/`` folder, beside the seeds of a multi-seed output, or inside a run folder that a live process holds;
    None when none applies."""
    path = Path(os.path.abspath(path))
    folder = Path(os.path.realpath(path.parent))
    name = path.name
    if name in (*RUN_FILES, LOCK_FILE) and is_run_dir(folder):
        return f"it is the run's own {name} (run folder {folder})"
    for ancestor in (folder, *folder.parents):
        if ancestor.name == TB_DIR and is_run_dir(ancestor.parent):
            return f"it lies in the TensorBoard folder of run {ancestor.parent}"
    if name in OUTPUT_FILES and any(is_run_dir(child) for child in folder.glob("seed-*")):
        return f"it is the {name} that train writes for the seeds of {folder}"
    for ancestor in (folder, *folder.parents):
        holder = live_holder(ancestor) if os.path.isfile(ancestor / LOCK_FILE) else None
        if holder is not None:
            return f"it lies inside run {ancestor}, which {holder} is training"
    return None


class RunLock:
    """The lock of one run folder, held from :meth:`acquire` to :meth:`release` (a context manager too)."""

    def __init__(self, folder: str | Path, note: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder)
        self.note = note
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        """Create the folder if needed and take its lock; :class:`RunLockedError` naming the holder when a live
        process has it. A description left by a holder that died is replaced, with a note."""
        path = self.folder / LOCK_FILE
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = _open_regular(path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise UsageError(f"run folder {self.folder}: cannot take its lock {path} ({reason_of(e)}); it must be "
                             "a regular file rl-gpu writes (move away whatever is there)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(f"run folder {self.folder} is in use by {_holder_text(path)}: one process per "
                                 "run folder; wait for it to end (or stop it), or choose another --output") \
                from None
        except OSError:
            os.close(fd)
            raise
        left = os.pread(fd, 4096, 0)
        if left.strip() and self.note is not None:
            self.note(f"note: took over the lock of run folder {self.folder} from {_holder_text(path)}, which "
                      "is no longer running")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:500],
                "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Clear the holder's description and drop the lock (the file stays)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()



class RunLocks:
    """The locks of a run's folders (every seed's), taken together: all or none. The folders this created to take
    the locks (the seeds' and the output folder above them) are removed again on :meth:`release` when nothing but
    the lock was written in them (a run refused after its checks, before it started)."""

    def __init__(self, folders: list[Path], note: Callable[[str], None] | None = None) -> None:
        self.locks: list[RunLock] = []
        self.created: list[Path] = []
        try:
            for folder in map(Path, folders):
                missing = []
                while not os.path.lexists(folder) and folder != folder.parent:
                    missing.append(folder)
                    folder = folder.parent
                self.created += reversed(missing)  # outermost first
            for folder in map(Path, folders):
                self.locks.append(RunLock(folder, note).acquire())
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []
        for folder in reversed(self.created):  # innermost first; a folder anything else was written in stays
            try:
                if [entry.name for entry in folder.iterdir()] == [LOCK_FILE]:
                    (folder / LOCK_FILE).unlink()
                folder.rmdir()
            except OSError:
                pass
        self.created = []

    def __enter__(self) -> "RunLocks":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def check_run_folder(run_dir: str | Path) -> None:
    """Refuse, before a resume trains, a run folder whose files are not what the run wrote: one of
    :data:`RUN_FILES` that is a directory, a symbolic link or any other non-regular file, or a ``tb`` that is not
    a directory (the run would fail on it only after training, or write through it)."""
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        path = run_dir / name
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
            what = "a symbolic link" if os.path.islink(path) else "a directory" if path.is_dir() else "not a file"
            raise UsageError(f"{path} is {what}, not the file the run writes: the run folder is damaged; move it "
                             "away (the run rewrites it) or restore it")
    tb = run_dir / TB_DIR
    if os.path.islink(tb) or (os.path.lexists(tb) and not tb.is_dir()):
        raise UsageError(f"{tb} is not a directory (TensorBoard writes its event files there): the run folder is "
                         "damaged; move it away or restore it")
