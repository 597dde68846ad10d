"""What ``dlsched docker cleanup`` removes: the containers whose owner process is gone.

Every container the Docker backend starts carries its owner (host, pid, process start time:
:class:`~dlsched.envs.owner.ProcessOwner`). A container is an **orphan** when its owner is gone,
or when it has no owner labels and does not run (what a dlsched older than those labels left
behind); it is **live** when its owner still runs here (an evaluation in another shell, another
user's training) or runs on another host, where this host cannot tell, and also when it runs
without owner labels: nothing says whose it is, so nothing says its episode is over (another
program may label its containers ``dlsched.managed=1``, and an older dlsched's episode may
still run). Cleanup removes orphans, and live containers only when asked to by name
(``include_live=True``), because removing them breaks the episode that owns them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import docker

from dlsched.envs.docker.containers import (
    LABEL_EPISODE,
    LABEL_JOB,
    container_owner,
    managed_containers,
    remove_containers,
)
from dlsched.envs.owner import OwnerState, ProcessOwner

#: Engine states in which a container runs (or will again): one without owner labels in one of
#: them may belong to an episode that is not over.
_RUNNING_STATES = frozenset({"running", "paused", "restarting"})


@dataclass(frozen=True)
class ManagedContainer:
    """One container of the Docker backend, and whether its owner still runs.

    Attributes:
        summary: the engine's summary of it (as ``containers(all=True)`` lists it).
        owner: the process that started it, ``None`` for a container of an older dlsched.
        owner_state: whether that process runs (``None`` without an owner).
    """

    summary: dict[str, Any]
    owner: ProcessOwner | None
    owner_state: OwnerState | None

    @property
    def orphan(self) -> bool:
        """Whether nothing owns it any more: its owner is gone, or it has no owner labels and
        does not run."""
        if self.owner is None:
            return self.summary.get("State") not in _RUNNING_STATES
        return self.owner_state is OwnerState.GONE

    def describe(self) -> str:
        """Id, name, episode, job, state and owner, on one line."""
        labels = self.summary.get("Labels") or {}
        names = ",".join(name.lstrip("/") for name in self.summary.get("Names") or [])
        return (
            f"{self.summary['Id'][:12]} {names} (episode {labels.get(LABEL_EPISODE, '?')}, job "
            f"{labels.get(LABEL_JOB, '?')}, {self.summary.get('State', '?')}; {self.whose()})"
        )

    def whose(self) -> str:
        """Whose it is and why that makes it an orphan or live."""
        if self.owner is None:
            if not self.orphan:
                return (
                    "running without owner labels: started by another program or by a dlsched "
                    "older than owner labels, whose episode may still run"
                )
            return "no owner label: started by a dlsched older than owner labels"
        if self.owner_state is OwnerState.GONE:
            return f"owner pid {self.owner.pid} on {self.owner.host} is gone"
        if self.owner_state is OwnerState.UNKNOWN:
            return (
                f"owned by pid {self.owner.pid} on host {self.owner.host}, which this host "
                "cannot check"
            )
        return f"live: owned by {self.owner.describe()}"


def classify(client: docker.DockerClient, episode: str | None = None) -> list[ManagedContainer]:
    """Every managed container (of one episode, with ``episode``) with its owner's state."""
    found = []
    for summary in managed_containers(client, episode):
        owner = container_owner(summary)
        found.append(ManagedContainer(summary, owner, None if owner is None else owner.state()))
    return found


@dataclass(frozen=True)
class CleanupResult:
    """What one cleanup of one engine did.

    Attributes:
        removed: the containers removed (or, on a dry run, that would be).
        left: the live containers left running.
    """

    removed: tuple[ManagedContainer, ...]
    left: tuple[ManagedContainer, ...]


def cleanup(
    client: docker.DockerClient,
    episode: str | None = None,
    include_live: bool = False,
    dry_run: bool = False,
    before_live: Callable[[ManagedContainer], None] | None = None,
) -> CleanupResult:
    """Remove the orphaned managed containers (and the live ones with ``include_live``).

    Args:
        client: the engine.
        episode: only the containers of this episode.
        include_live: remove the containers of live owners too.
        dry_run: remove nothing; say what would be removed.
        before_live: called with each live container before anything is removed (to name
            them).
    """
    containers = classify(client, episode)
    chosen = [c for c in containers if c.orphan or include_live]
    left = tuple(c for c in containers if not (c.orphan or include_live))
    if before_live is not None:
        for container in live(chosen):
            before_live(container)
    if dry_run:
        return CleanupResult(tuple(chosen), left)
    removed_ids = {s["Id"] for s in remove_containers(client, [c.summary for c in chosen])}
    return CleanupResult(tuple(c for c in chosen if c.summary["Id"] in removed_ids), left)


def live(containers: Sequence[ManagedContainer]) -> list[ManagedContainer]:
    """The containers among ``containers`` whose owner still runs (or cannot be checked, or
    that run without owner labels)."""
    return [container for container in containers if not container.orphan]
