"""Stopping a run cleanly on SIGINT / SIGTERM."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Stopped(BaseException):
    """Raised inside :meth:`StopRequest.abortable` when a stop signal arrives (or had arrived). A
    ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """SIGINT/SIGTERM handler: the first signal asks the loop to finish its update, save and exit; a second
    one interrupts at once (the newest checkpoint is still intact). ``signum`` is the first signal received.

    Work that writes nothing (an evaluation) runs inside :meth:`abortable`: there the first signal raises
    :class:`Stopped` at once instead of waiting for the work to end, so a long validation or final evaluation
    does not hold a stopped run for minutes.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._abortable = 0

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:
                pass  # not the main thread: signals stay with the caller
        return self

    @contextlib.contextmanager
    def abortable(self) -> Iterator[None]:
        """A stretch of work a stop signal may cut short: raises :class:`Stopped` on entry if a signal has
        already arrived, and from the signal handler if one arrives inside."""
        if self.signum is not None:
            raise Stopped(self.signum)
        self._abortable += 1
        try:
            yield
        finally:
            self._abortable -= 1

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        if self._abortable:
            raise Stopped(signum)

    def agree(self) -> None:
        """Make the stop decision the same on every process of a torchrun launch (a no-op for one process:
        :class:`~rl_gpu.training.ranks.RankStopRequest` overrides it)."""

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
