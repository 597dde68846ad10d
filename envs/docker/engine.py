"""Docker engines: where an endpoint points, a client checked to answer, and their timestamps.

Every part of dlsched that talks to an engine (the backend, the image build, calibration, the
benchmarks, ``dlsched docker cleanup``) connects through :func:`connect`, so that an engine that
is missing or refuses this user is reported the same way everywhere.
"""

from __future__ import annotations

import os
from datetime import datetime

import docker
import docker.errors

from dlsched.envs.errors import DockerUnavailableError

DEFAULT_LOCAL_SOCKET = "unix:///var/run/docker.sock"


def endpoint_url(endpoint: str | None) -> str:
    """The URL an endpoint resolves to (``None``: ``DOCKER_HOST`` or the local socket)."""
    return endpoint or os.environ.get("DOCKER_HOST") or DEFAULT_LOCAL_SOCKET


def connect(endpoint: str | None = None, timeout_s: float = 60.0) -> docker.DockerClient:
    """A client of the engine at ``endpoint``, checked to answer.

    Args:
        endpoint: an engine URL as docker-py takes it, or ``None`` for the environment's.
        timeout_s: timeout of each API call (an image import answers only at its end).

    Raises:
        DockerUnavailableError: no engine answers there, or this user may not use its socket.
    """
    environment = dict(os.environ)
    if endpoint is not None:
        environment["DOCKER_HOST"] = endpoint
    url = endpoint_url(endpoint)
    try:
        client = docker.from_env(environment=environment, timeout=timeout_s, max_pool_size=64)
        client.ping()
    except docker.errors.DockerException as error:
        if _permission_denied(error):
            raise DockerUnavailableError(
                f"permission denied on the Docker socket {url}: {error}; add this user to the "
                "'docker' group (`sudo usermod -aG docker $USER`, then log in again), run as "
                "root, or point DOCKER_HOST at an engine this user may use"
            ) from error
        raise DockerUnavailableError(
            f"no Docker engine answers at {url}: {error}; start one (`sudo systemctl start "
            "docker`, or `sudo dockerd &`), or point the scenario's worker endpoint or "
            "DOCKER_HOST at a running engine"
        ) from error
    return client


def engine_cores(endpoint: str | None = None) -> float:
    """The cores (``NCPU``) of the engine at ``endpoint`` (``None``: the environment's).

    Raises:
        DockerUnavailableError: no engine answers there (see :func:`connect`).
    """
    client = connect(endpoint)
    try:
        return float(client.info()["NCPU"])
    finally:
        client.close()


def unix_time(timestamp: str) -> float:
    """Unix time of an engine timestamp (RFC 3339 with up to nanoseconds, ``Z``)."""
    return datetime.fromisoformat(timestamp).timestamp()


def _permission_denied(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, PermissionError) or "Permission denied" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
