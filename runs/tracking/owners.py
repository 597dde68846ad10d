"""Runs whose process is gone: every run carries its owner, later commands end orphaned runs.

A run is ``RUNNING`` until its process ends it. A process killed outright (SIGKILL, a lost
machine, the OOM killer) cannot, and MLflow would show its runs ``RUNNING`` for ever (and
``dlsched compare``, which reads finished episodes, would silently leave them out). So every
run dlsched starts carries its owner as tags (``dlsched.owner.host``, ``.pid``, ``.started``:
see :class:`~dlsched.envs.owner.ProcessOwner`), and :func:`end_orphaned_runs`, which every
command that opens a store calls (and ``dlsched runs repair`` on demand), marks ``KILLED`` the
runs of this host whose owner is gone. Runs owned from another host are left alone: whether
their process lives cannot be told from here.
"""

from __future__ import annotations

import contextlib
import io
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from mlflow import MlflowClient
from mlflow.entities import Run, ViewType

from dlsched.envs.owner import OwnerState, ProcessOwner
from dlsched.runs.interruption import count_killed_run

#: Prefix of the owner tags of every run dlsched starts.
OWNER_TAG_PREFIX = "dlsched.owner"
#: Set on a run that a later command ended because its owner was gone.
TAG_ENDED_BY = "dlsched.ended_by"


def owner_tags() -> dict[str, str]:
    """The owner tags of a run this process starts."""
    return ProcessOwner.current().as_labels(OWNER_TAG_PREFIX)


@dataclass(frozen=True)
class OrphanedRun:
    """A ``RUNNING`` run whose owner process is gone.

    Attributes:
        run_id: the run.
        name: its name.
        experiment_id: its experiment.
        owner: the process that started it.
    """

    run_id: str
    name: str
    experiment_id: str
    owner: ProcessOwner


def orphaned_runs(client: MlflowClient) -> list[OrphanedRun]:
    """Every ``RUNNING`` run of this host, in the store, whose owner process is gone."""
    experiments = _experiment_ids(client)
    if not experiments:
        return []
    host = socket.gethostname().replace("'", "")
    query = f"attributes.status = 'RUNNING' and tags.`{OWNER_TAG_PREFIX}.host` = '{host}'"
    found: list[OrphanedRun] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            experiments, query, ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
        )
        found += [orphan for run in page if (orphan := _orphan(run)) is not None]
        token = page.token
        if not token:
            return found


def _orphan(run: Run) -> OrphanedRun | None:
    owner = ProcessOwner.from_labels(run.data.tags, OWNER_TAG_PREFIX)
    if owner is None or owner.state() is not OwnerState.GONE:
        return None
    return OrphanedRun(run.info.run_id, run.info.run_name, run.info.experiment_id, owner)


def _experiment_ids(client: MlflowClient) -> list[str]:
    ids: list[str] = []
    token: str | None = None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        ids += [str(experiment.experiment_id) for experiment in page]
        token = page.token
        if not token:
            return ids


def end_orphaned_runs(
    client: MlflowClient, notify: Callable[[str], None] | None = None
) -> list[OrphanedRun]:
    """Mark ``KILLED`` every run of this host whose owner is gone; the runs it ended.

    Args:
        client: the store.
        notify: told, in one line, how many runs were ended (nothing when none was).
    """
    orphans = orphaned_runs(client)
    me = ProcessOwner.current()
    for orphan in orphans:
        client.set_tag(
            orphan.run_id,
            TAG_ENDED_BY,
            f"pid {me.pid} on {me.host}: its owner, pid {orphan.owner.pid}, was gone",
        )
        end_run(client, orphan.run_id, "KILLED")
    if orphans and notify is not None:
        names = ", ".join(orphan.name for orphan in orphans[:5])
        more = f" and {len(orphans) - 5} more" if len(orphans) > 5 else ""
        notify(
            f"tracking: marked {len(orphans)} run{'s' if len(orphans) != 1 else ''} KILLED whose "
            f"process had died without ending them ({names}{more})"
        )
    return orphans


def end_run(client: MlflowClient, run_id: str, status: str, links: TextIO | None = None) -> None:
    """End a run; MLflow's "View run" links (HTTP stores) go to ``links``, never to stdout.

    MLflow prints them to stdout, where they would break ``--json`` output.

    Args:
        client: the store.
        run_id: the run.
        status: ``FINISHED``, ``FAILED`` or ``KILLED``.
        links: where the links go (dropped by default).
    """
    with contextlib.redirect_stdout(links or io.StringIO()):
        client.set_terminated(run_id, status)
    if status == "KILLED":
        count_killed_run()
