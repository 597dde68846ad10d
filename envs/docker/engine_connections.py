"""The Docker backend's engines: a client per endpoint, each worker's engine, and which are lost.

:class:`EngineConnections` connects to each distinct endpoint of an episode's workers (a client
is kept across episodes and released at the backend's close), checks there that the workload
image is present, and gives each worker its :class:`Engine`. During the episode it keeps which
engines stopped answering: a call that loses its connection marks its engine lost instead of
raising (:meth:`EngineConnections.answering`), each loss is reported once as an incident, and an
episode whose every engine is lost ends in :class:`~dlsched.envs.errors.EngineLostError`
(:meth:`EngineConnections.calls`). The next episode connects to a lost engine again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import docker
import docker.errors
import requests

from dlsched.envs.docker.engine import connect, endpoint_url
from dlsched.envs.errors import EngineLostError, ImageMissingError

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Engine:
    """One worker's engine: its client and what it reported at reset."""

    endpoint: str | None
    client: docker.DockerClient
    cores: float


class EngineConnections:
    """The engines of the backend's workers, and which of them stopped answering this episode.

    Indexing by worker gives that worker's :class:`Engine` (workers that share an endpoint
    share the engine); ``len`` is the number of workers.
    """

    def __init__(
        self,
        image: str | None,
        api_timeout_s: float,
        clock: Callable[[], float],
        report: Callable[[str], None],
    ) -> None:
        """Configure the connections; nothing is contacted before :meth:`open`.

        Args:
            image: the workload image every engine must have; ``None`` is dlsched's own.
            api_timeout_s: timeout of each engine API call.
            clock: the episode's time in seconds, to say when an engine was lost.
            report: takes the incident that says an engine was lost (once per engine).
        """
        self._image = image
        self._api_timeout_s = api_timeout_s
        self._clock = clock
        self._report = report
        self._clients: dict[str | None, docker.DockerClient] = {}
        self._workers: tuple[Engine, ...] = ()
        #: Engines of this episode that stopped answering: endpoint -> the error's type name.
        self._lost: dict[str | None, str] = {}
        self._lost_lock = threading.Lock()

    def __getitem__(self, worker: int) -> Engine:
        return self._workers[worker]

    def __len__(self) -> int:
        return len(self._workers)

    def __iter__(self) -> Iterator[Engine]:
        return iter(self._workers)

    def open(self, endpoints: Sequence[str | None]) -> None:
        """Connect the engines of an episode's workers, given each worker's endpoint.

        Engines lost in the previous episode are connected again (one may be back, or says
        it is not).

        Raises:
            DockerUnavailableError: an engine does not answer or refuses this user.
            ImageMissingError: the workload image is not on an engine.
        """
        for endpoint in self._lost:
            lost_client = self._clients.pop(endpoint, None)
            if lost_client is not None:
                lost_client.close()
        self._lost = {}
        engines = {endpoint: self._engine(endpoint) for endpoint in dict.fromkeys(endpoints)}
        self._workers = tuple(engines[endpoint] for endpoint in endpoints)

    def close(self) -> None:
        """Release every client."""
        for client in self._clients.values():
            client.close()
        self._clients = {}

    def clients(self) -> dict[str | None, docker.DockerClient]:
        """The client of each engine of the episode that is not lost, by endpoint."""
        return {
            engine.endpoint: engine.client
            for engine in self._workers
            if engine.endpoint not in self._lost
        }

    def worker_lost(self, worker: int) -> bool:
        """Whether the engine of ``worker`` stopped answering this episode."""
        return self._workers[worker].endpoint in self._lost

    @contextlib.contextmanager
    def answering(self, endpoint: str | None) -> Iterator[None]:
        """Calls to the engine at ``endpoint``; a lost connection marks it lost, not raised."""
        try:
            yield
        except requests.exceptions.ConnectionError as error:
            self.lose(endpoint, error)

    @contextlib.contextmanager
    def calls(self, episode: str | None) -> Iterator[None]:
        """Engine calls after which an episode whose every engine is lost is an
        :class:`EngineLostError` (one lost engine of several only fails its jobs).

        A lost connection of a call outside any one engine's :meth:`answering` counts every
        engine as lost.
        """
        try:
            yield
        except requests.exceptions.ConnectionError as error:
            for engine in self._workers:
                self.lose(engine.endpoint, error)
        endpoints = {engine.endpoint for engine in self._workers}
        if self._lost and endpoints <= set(self._lost):
            engines = ", ".join(endpoint_url(endpoint) for endpoint in dict.fromkeys(endpoints))
            raise EngineLostError(
                f"the Docker engine at {engines} stopped answering mid-episode "
                f"({', '.join(sorted(set(self._lost.values())))}); episode {episode} is "
                "lost, and its containers may still run there: when the engine is back, remove "
                "them with `dlsched docker cleanup`"
            ) from None

    def lose(self, endpoint: str | None, error: BaseException) -> None:
        """Count the engine at ``endpoint`` lost for the rest of the episode (once)."""
        with self._lost_lock:
            if endpoint in self._lost:
                return
            self._lost[endpoint] = type(error).__name__
        workers = [i for i, engine in enumerate(self._workers) if engine.endpoint == endpoint]
        message = (
            f"the Docker engine at {endpoint_url(endpoint)} stopped answering at "
            f"{self._clock():.0f} s ({type(error).__name__}): the jobs of worker"
            f"{'s' if len(workers) != 1 else ''} {', '.join(map(str, workers))} failed, and its "
            "containers may still run there (`dlsched docker cleanup --endpoint "
            f"{endpoint_url(endpoint)}` when it is back)"
        )
        self._report(message)
        _log.warning("%s", message)

    def _engine(self, endpoint: str | None) -> Engine:
        client = self._clients.get(endpoint)
        if client is None:
            client = connect(endpoint, self._api_timeout_s)
            self._clients[endpoint] = client
        self._check_image(client, endpoint)
        cores = float(client.info()["NCPU"])
        return Engine(endpoint, client, cores)

    def _check_image(self, client: docker.DockerClient, endpoint: str | None) -> None:
        if self._image is None:
            from dlsched.envs.docker.image import IMAGE_TAG, build_hint, image_present

            if not image_present(client):
                raise ImageMissingError(
                    f"the workload image {IMAGE_TAG!r} is not on the engine at "
                    f"{endpoint_url(endpoint)}; build it with `{build_hint()}`"
                )
            return
        try:
            client.images.get(self._image)
        except docker.errors.ImageNotFound:
            raise ImageMissingError(
                f"the image {self._image!r} is not on the engine at {endpoint_url(endpoint)}; "
                "build or load it there (dlsched's own: `dlsched image build --offline`)"
            ) from None
