"""Helpers of the tests that run containers on a Docker engine.

- :func:`bystander_and_leftover`: a container dlsched did not start, which an episode and
  ``dlsched docker cleanup`` must leave running as it was (:func:`assert_left_alone`), beside
  one labelled as dlsched's whose episode is gone;
- :func:`interrupted_episode_script`: a program that starts an episode and runs until a signal
  stops it (run it with the ``episode_process`` fixture of ``conftest.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import docker.errors

from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_JOB, LABEL_MANAGED

#: The CPU limit of a bystander: a quota of 30 ms per 100 ms period, 0.3 CPUs.
BYSTANDER_QUOTA, BYSTANDER_PERIOD = 30_000, 100_000


@contextlib.contextmanager
def bystander_and_leftover(client, image: str, episode: str) -> Iterator[tuple[Any, Any]]:
    """A bystander and a leftover on ``client``'s engine, for the body of the ``with``; both
    are removed on leaving it.

    The bystander is a container without dlsched's labels, started: an idle loop at 0.3 CPUs
    and no network, which dlsched must neither stop nor limit otherwise
    (:func:`assert_left_alone`). The leftover is a container labelled as job j00 of dlsched's
    ``episode`` with no owner labels, created and not started: what a dlsched older than those
    labels left behind, which ``dlsched docker cleanup`` removes.
    """
    bystander = client.containers.run(
        image,
        ["python", "-c", "import time\nwhile True: time.sleep(0.2)"],
        detach=True,
        cpu_period=BYSTANDER_PERIOD,
        cpu_quota=BYSTANDER_QUOTA,
        labels={"dlsched.test": "bystander"},  # no dlsched.managed
        network_mode="none",
    )
    try:
        leftover = client.containers.create(
            image,
            ["python", "-c", "pass"],
            labels={LABEL_MANAGED: "1", LABEL_EPISODE: episode, LABEL_JOB: "j00"},
            network_mode="none",
        )
        try:
            yield bystander, leftover
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                leftover.remove(force=True)
    finally:
        bystander.remove(force=True)


def assert_left_alone(client, bystander, before: dict) -> None:
    """Assert that ``bystander`` still runs as it did when inspected as ``before``: not
    restarted, its CPU limit unchanged."""
    after = client.api.inspect_container(bystander.id)
    assert after["State"]["Running"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    assert after["RestartCount"] == 0
    assert after["HostConfig"]["CpuQuota"] == BYSTANDER_QUOTA
    assert after["HostConfig"]["CpuPeriod"] == BYSTANDER_PERIOD


def interrupted_episode_script(
    name: str,
    workers: Sequence[tuple[float, str | None]],
    placements: Sequence[tuple[str, int, int]],
) -> str:
    """A Python program that starts an inference episode of two mobilenet-svc services on the
    Docker backend, prints the episode's id and runs on for 300 s: a test stops it with a signal.

    Args:
        name: the scenario's name.
        workers: each worker's cores and endpoint (``None``: the local engine).
        placements: where each job starts: its id, worker and slot.
    """
    return f"""
import numpy as np
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec

scenario = Scenario(
    name={name!r}, kind=JobKind.INFERENCE,
    workers=tuple(WorkerSpec(cores, endpoint) for cores, endpoint in {list(workers)!r}),
    groups=(JobGroup(workloads=("mobilenet-svc",), count=2, targets_s=(5.0,)),),
    profile_set="measured",
)
backend = DockerBackend()
episode = ControlledEpisode(backend, scenario)
jobs = scenario.realise(np.random.default_rng(0))
episode.reset(jobs, np.random.default_rng(0))
episode.place([Placement(*placement) for placement in {list(placements)!r}])
episode.advance(0.0)
print(backend.episode, flush=True)
episode.advance(300.0)
"""
