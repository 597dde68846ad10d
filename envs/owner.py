"""Who owns a container or a run: a process on a host, told apart from a later one with its pid.

Everything dlsched leaves in a shared place (containers on a shared engine, runs in a shared
tracking store) carries its owner: the host name, the process id and the process's start time.
A pid alone is not enough, because the system reuses pids; the start time tells the process that
started a container from a later one that happens to get the same pid.

Another command can then tell what is safe to touch: a container or run whose owner is
:attr:`OwnerState.GONE` was left behind by a process that died (SIGKILL, a lost terminal, a
crash) and can be removed or marked ended; one whose owner is :attr:`OwnerState.ALIVE` belongs to
a live episode, and one owned from another host cannot be judged from here
(:attr:`OwnerState.UNKNOWN`).
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

#: Start times that differ by less than this are the same process (clock rounding).
START_TIME_TOLERANCE_S = 1.0


class OwnerState(enum.Enum):
    """Whether the owner of something still runs, as seen from this host."""

    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"  # owned from another host


@dataclass(frozen=True)
class ProcessOwner:
    """A process, identified across pid reuse.

    Attributes:
        host: the host name it runs on.
        pid: its process id.
        started: its start time, in Unix seconds.
    """

    host: str
    pid: int
    started: float

    @classmethod
    def current(cls) -> ProcessOwner:
        """This process."""
        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time())

    def as_labels(self, prefix: str) -> dict[str, str]:
        """The owner as string labels or tags: ``<prefix>.host``, ``.pid``, ``.started``."""
        return {
            f"{prefix}.host": self.host,
            f"{prefix}.pid": str(self.pid),
            f"{prefix}.started": f"{self.started:.3f}",
        }

    @classmethod
    def from_labels(cls, labels: Mapping[str, str], prefix: str) -> ProcessOwner | None:
        """The owner :meth:`as_labels` wrote, ``None`` if the labels have none (or a broken one)."""
        try:
            return cls(
                labels[f"{prefix}.host"],
                int(labels[f"{prefix}.pid"]),
                float(labels[f"{prefix}.started"]),
            )
        except (KeyError, ValueError):
            return None

    def state(self) -> OwnerState:
        """Whether this owner still runs (checked on this host only)."""
        if self.host != socket.gethostname():
            return OwnerState.UNKNOWN
        try:
            started = psutil.Process(self.pid).create_time()
        except psutil.NoSuchProcess:
            return OwnerState.GONE
        except psutil.Error:
            return OwnerState.ALIVE  # it exists but may not be inspected: assume the worst
        if abs(started - self.started) > START_TIME_TOLERANCE_S:
            return OwnerState.GONE  # the pid was reused by a later process
        return OwnerState.ALIVE

    def describe(self) -> str:
        """``pid 123 on host h`` and, while it runs here, its command line."""
        text = f"pid {self.pid} on {self.host}"
        if self.state() is OwnerState.ALIVE and self.host == socket.gethostname():
            try:
                command = " ".join(psutil.Process(self.pid).cmdline())
            except psutil.Error:
                command = ""
            if command:
                text += f" ({command[:120]})"
        return text
