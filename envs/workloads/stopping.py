"""Stopping a workload between units of work when it is asked to (SIGTERM).

``docker stop`` sends SIGTERM to the container's first process, which is the workload itself; a
process with pid 1 that installs no handler ignores SIGTERM and is killed ten seconds later. The
workloads instead note the request and stop at the end of the current iteration or batch, so a
training job can write a consistent checkpoint and a service exits promptly.
"""

from __future__ import annotations

import signal
from types import FrameType


class StopRequest:
    """Whether SIGTERM has arrived since :meth:`install`."""

    def __init__(self) -> None:
        self._requested = False

    @property
    def requested(self) -> bool:
        """True once SIGTERM has been received."""
        return self._requested

    def install(self) -> None:
        """Handle SIGTERM by recording it (call from the main thread)."""
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True
