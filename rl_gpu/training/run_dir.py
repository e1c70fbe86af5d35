"""A run's directory: the files the tool writes there, and preparing it without touching anything else.

``--overwrite`` removes only what a run writes: the files named in
:data:`~rl_gpu.runtime.run_files.RUN_FILES` and the ``tb/`` folder (never the folder's lock, which the overwriting
run holds: :mod:`rl_gpu.runtime.run_files`) (a
``tb`` that is a symbolic link is unlinked, never followed). Anything else under those names (a directory
called ``last.pt``, a FIFO, a device) is refused before anything is deleted, and :func:`check_run_dirs`
checks every seed's directory before the first one is touched. A seed directory that is a symbolic link is
refused: the run's files (and ``--overwrite``'s deletions) would land outside the output folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.files import describe_kind, reason
from rl_gpu.runtime.run_files import LOCK_FILE, RUN_FILES, TB_DIR  # noqa: F401 (RUN_FILES: callers read it here)



def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise UsageError(f"{path}: cannot inspect it ({reason(e)})") from None


def _check(run_dir: Path, overwrite: bool) -> bool:
    """Refuse ``run_dir`` unless a run may be written there; returns whether ``--overwrite`` has files of an
    earlier run to remove. Changes nothing."""
    st = _lstat(run_dir)
    if st is None:
        ancestor = run_dir.parent
        while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise UsageError(f"cannot create run directory {run_dir}: {ancestor} is not a directory")
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"run directory {run_dir} is a symbolic link (to {os.readlink(run_dir)}): a run writes "
                         "into a real directory only; remove the link or choose another --output")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} exists and is a {describe_kind(st.st_mode)}, not a run directory; "
                         "choose another --output")
    try:
        empty = not any(entry.name != LOCK_FILE for entry in run_dir.iterdir())  # the lock is no content
    except OSError as e:
        raise UsageError(f"run directory {run_dir}: cannot list it ({reason(e)})") from None
    if empty:
        return False
    if not overwrite:
        raise UsageError(f"run directory {run_dir} already exists and is not empty; pass --overwrite to "
                         "replace it, --resume to continue it, or choose another --output")
    for name in RUN_FILES:
        entry = _lstat(run_dir / name)
        if entry is not None and not (stat.S_ISREG(entry.st_mode) or stat.S_ISLNK(entry.st_mode)):
            raise UsageError(f"--overwrite: {run_dir / name} is a {describe_kind(entry.st_mode)}, not a file "
                             "rl-gpu wrote; move it away (nothing was deleted)")
    tb = _lstat(run_dir / TB_DIR)
    if tb is not None and not (stat.S_ISDIR(tb.st_mode) or stat.S_ISLNK(tb.st_mode)):
        raise UsageError(f"--overwrite: {run_dir / TB_DIR} is a {describe_kind(tb.st_mode)}, not the "
                         "TensorBoard folder rl-gpu writes; move it away (nothing was deleted)")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--overwrite: cannot remove files from {run_dir} (permission denied; nothing was "
                         "deleted)")
    return True


def check_run_dirs(run_dirs: list[Path], overwrite: bool) -> None:
    """Refuse (before anything is written or deleted) run directories that exist and are not empty, unless
    ``overwrite``, and with ``overwrite`` any whose run files are not ours to remove: every directory is
    checked before the first one is touched."""
    for run_dir in run_dirs:
        _check(Path(run_dir), overwrite)


def _remove_run_files(run_dir: Path) -> None:
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    tb = run_dir / TB_DIR
    tb_stat = _lstat(tb)
    if tb_stat is not None and stat.S_ISLNK(tb_stat.st_mode):
        tb.unlink()
    elif tb_stat is not None:
        shutil.rmtree(tb)


@contextlib.contextmanager
def discarded_unless_started(run_dir: Path, started: Callable[[], bool]) -> Iterator[None]:
    """Around a fresh run: an exception (the user's environment raising in its own code, say) before anything was
    trained (``started()`` False) removes the files the run wrote, so the folder is not left half-made (a rerun
    needs no ``--overwrite``); the exception goes on unchanged."""
    try:
        yield
    except Exception:
        if not started():
            with contextlib.suppress(OSError):
                _remove_run_files(Path(run_dir))
        raise


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Create ``run_dir``; refuse an existing non-empty one unless ``overwrite`` (then remove the files of the
    earlier run, :data:`RUN_FILES` and ``tb/``, and nothing else)."""
    run_dir = Path(run_dir)
    try:
        if _check(run_dir, overwrite):
            _remove_run_files(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"run directory {run_dir}: {reason(e)}") from None
