"""The backends by name: what ``backend=`` of the environments accepts.

The interface (:mod:`dlsched.envs.backend`) knows no implementation; this module does, and
imports each only when it is asked for, so that the replay backend never loads docker-py, and
the Docker backend only once the docker extra is known to be installed.
"""

from __future__ import annotations

from typing import Any

from dlsched.envs.backend import Backend
from dlsched.envs.errors import UnknownNameError
from dlsched.envs.extras import require_extra

#: The registered backend names.
BACKENDS: tuple[str, ...] = ("replay", "docker")


def backend_class(name: str) -> type[Backend]:
    """The class of the backend registered as ``name`` (``replay`` or ``docker``).

    Raises:
        UnknownNameError: no backend has that name.
        MissingExtraError: ``docker`` without the docker extra.
    """
    if name == "replay":
        from dlsched.envs.replay.backend import ReplayBackend

        return ReplayBackend
    if name == "docker":
        require_extra("docker", "the Docker backend")
        from dlsched.envs.docker.backend import DockerBackend

        return DockerBackend
    raise UnknownNameError("backend", name, BACKENDS)


def make_backend(name: str, **kwargs: Any) -> Backend:
    """Build a backend by its registered name (``replay`` or ``docker``)."""
    return backend_class(name)(**kwargs)
