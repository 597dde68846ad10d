"""A quiet host: what every measurement of the replay model's numbers needs.

A profile or a contention curve measured while other work holds some cores describes that
crowded host, not the workload: the shipped profiles of an earlier release were recorded with
1.0-1.5 cores busy elsewhere, and their demands came out 25-45% low. So calibration waits for the
host to be quiet, records how busy it was while it measured, and refuses to write what it measured
on a busy host unless the user forces it (:class:`~dlsched.envs.errors.HostBusyError`).

"Busy" is the CPU the host's other processes use: all CPU time the kernel counts
(``/proc/stat``) minus the measured containers' own, and any other container running on the
engine. dlsched never lists containers it did not start, so the engine's running count stands
for them.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from dlsched.envs.errors import HostBusyError

#: Cores other processes may use while the host counts as quiet (default).
QUIET_CORES = 0.15
_STAT_FILE = Path("/proc/stat")


def host_busy_seconds(stat_file: Path = _STAT_FILE) -> float:
    """CPU-seconds the host's cores have spent busy since boot (all but idle and iowait)."""
    fields = stat_file.read_text().splitlines()[0].split()
    ticks = [int(value) for value in fields[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user).
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def other_running_containers(client: docker.DockerClient, own: int = 0) -> int:
    """Containers running on the engine besides ``own`` of the measurement's.

    The engine's running count, not a listing: dlsched never queries containers it did not
    start, even only to count them.
    """
    return max(int(client.info().get("ContainersRunning", 0)) - own, 0)


@dataclass(frozen=True)
class HostLoad:
    """How busy the host was while nothing of the measurement ran.

    Attributes:
        busy_cores: cores the host's processes used, on average over the sample.
        containers: containers running on the engine.
    """

    busy_cores: float
    containers: int

    def quiet(self, quiet_cores: float) -> bool:
        return self.containers == 0 and self.busy_cores <= quiet_cores

    def describe(self) -> str:
        return f"{self.busy_cores:.2f} cores busy, {self.containers} other container(s) running"


def sample_load(client: docker.DockerClient, seconds: float = 2.0) -> HostLoad:
    """The host's load over ``seconds`` (nothing of the caller's may run meanwhile)."""
    before, started = host_busy_seconds(), time.monotonic()
    time.sleep(seconds)
    busy = (host_busy_seconds() - before) / (time.monotonic() - started)
    return HostLoad(busy_cores=busy, containers=other_running_containers(client))


def wait_until_quiet(
    client: docker.DockerClient,
    patience_s: float,
    quiet_cores: float = QUIET_CORES,
    force: bool = False,
) -> HostLoad | None:
    """Wait up to ``patience_s`` for a quiet host; the load it last saw.

    Args:
        client: the engine of the measurement.
        patience_s: how long to wait.
        quiet_cores: cores other processes may use while the host counts as quiet.
        force: go on when the host stays busy (the load is returned, to be recorded).

    Returns:
        The load of the last sample; ``None`` when ``force`` is on and ``patience_s`` is 0 or
        less, where no sample could change what follows and none is taken (it lasts seconds).

    Raises:
        HostBusyError: the host stayed busy for ``patience_s`` and ``force`` is off.
    """
    if force and patience_s <= 0:
        return None
    deadline = time.monotonic() + patience_s
    announced = False
    while True:
        load = sample_load(client)
        if load.quiet(quiet_cores):
            return load
        if time.monotonic() > deadline:
            if force:
                return load
            raise HostBusyError(busy_message(load.describe(), quiet_cores, patience_s))
        if not announced:
            print(f"waiting for a quiet host ({load.describe()}) ...", file=sys.stderr)
            announced = True


def busy_message(load: str, quiet_cores: float, patience_s: float | None = None) -> str:
    """The refusal of a measurement on a busy host, naming the load and the ways out."""
    waited = f" for {patience_s:g} s" if patience_s is not None else ""
    return (
        f"the host is busy ({load}; quiet means at most {quiet_cores:g} cores and no other "
        f"container){waited}: a measurement now would describe the crowded host, not the "
        "workload. Stop the other work and run it again, raise --wait-quiet or --quiet-cores, "
        "or pass --force to measure and write anyway (the load is recorded in the provenance)"
    )
