"""Stopping a run cleanly on SIGINT / SIGTERM."""

from __future__ import annotations

import signal


class StopRequest:
    """SIGINT/SIGTERM handler: the first signal asks the loop to finish its update, save and exit; a second
    one interrupts at once (the newest checkpoint is still intact). ``signum`` is the first signal received."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequest":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:
                pass  # not the main thread: signals stay with the caller
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
