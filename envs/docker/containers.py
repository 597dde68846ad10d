"""dlsched's containers on an engine: the labels they carry, and listing and removing them by those.

The Docker backend starts every container with ``dlsched.managed=1``, ``dlsched.episode=<uuid>``,
``dlsched.job=<job id>``, ``dlsched.worker=<index>`` and its owner process
(``dlsched.owner.host``, ``.pid``, ``.started``: :class:`~dlsched.envs.owner.ProcessOwner`).
Every query of the backend, of its interruption cleanup and of ``dlsched docker cleanup``
carries :data:`MANAGED_FILTER`, so a container without the label is never listed or removed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import docker
import docker.errors

from dlsched.envs.owner import ProcessOwner

LABEL_MANAGED = "dlsched.managed"
LABEL_EPISODE = "dlsched.episode"
LABEL_JOB = "dlsched.job"
LABEL_WORKER = "dlsched.worker"
#: Prefix of the owner labels: ``dlsched.owner.host``, ``.pid``, ``.started``.
LABEL_OWNER = "dlsched.owner"
#: The label filter every query of the backend and of ``dlsched docker cleanup`` carries.
MANAGED_FILTER = f"{LABEL_MANAGED}=1"


def managed_containers(
    client: docker.DockerClient, episode: str | None = None
) -> list[dict[str, Any]]:
    """Summaries (as the engine lists them) of the containers dlsched manages.

    Args:
        client: the engine.
        episode: only those of this episode; ``None`` for every episode.
    """
    labels = [MANAGED_FILTER]
    if episode is not None:
        labels.append(f"{LABEL_EPISODE}={episode}")
    summaries: list[dict[str, Any]] = client.api.containers(all=True, filters={"label": labels})
    return summaries


def container_owner(summary: Mapping[str, Any]) -> ProcessOwner | None:
    """The process that started a managed container (``None``: one of an older dlsched)."""
    return ProcessOwner.from_labels(summary.get("Labels") or {}, LABEL_OWNER)


def remove_containers(
    client: docker.DockerClient, summaries: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Force-remove listed managed containers, by id, with their anonymous volumes (a
    training's checkpoint); the summaries of those removed.

    One after another: this runs at interpreter exit and in signal handlers, where a thread
    pool refuses work. Each is killed first (the engine answers at once), so that none waits
    for another's removal to stop running. One that disappears meanwhile is skipped.
    """
    for summary in summaries:
        with contextlib.suppress(docker.errors.APIError):  # gone, or not running
            client.api.kill(summary["Id"])
    removed = []
    for summary in summaries:
        try:
            client.api.remove_container(summary["Id"], force=True, v=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as error:
            # "removal already in progress": another cleanup got there first.
            if error.status_code == 409:
                continue
            raise
        removed.append(summary)
    return removed


def remove_managed_containers(
    client: docker.DockerClient, episode: str | None = None
) -> list[Mapping[str, Any]]:
    """Force-remove dlsched's containers (of one episode, or all); the summaries of those removed.

    Each container is listed with the ``dlsched.managed=1`` filter and removed by id, so a
    container without the label is never touched.
    """
    return remove_containers(client, managed_containers(client, episode))
