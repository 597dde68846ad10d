"""Shared fixtures; each engineer's fixtures live in their own section below.

- mlflow: ``mlflow_store``, ``new_sqlite_store``, ``mlflow_server_factory``,
  ``new_experiment`` (a fresh experiment on the session's store), ``stored_episode``.
- docker: ``docker_engine`` (a client of the reachable engine; skips the test without one,
  fails it when DLSCHED_REQUIRE_DOCKER=1) and ``workload_image`` (the workload image, built
  offline once per session or reused; its tag), ``local_engines`` (two more engines on this
  machine, for cluster episodes). Mark tests that use them ``@pytest.mark.docker``.
- cli: ``evaluated_labels`` (``dlsched evaluate`` on one untracked episode).
- reliability: ``python_process``, ``dlsched_process`` and ``episode_process`` (children stopped
  with real signals), ``default_sigint``.
- torch: ``torch_on_one_thread`` (autouse, session): the test process runs torch on one thread.
"""

# --- mlflow ---
# One sqlite store per test session (MLflow's first use of a store migrates its schema, ~2 s,
# several times that on a loaded CI), new stores copied from one migrated once per session, and
# MLflow tracking servers started on loopback. Imports are local to keep this section
# self-contained.

import pytest

# helper modules of the tests whose asserts pytest explains as it does a test's
pytest.register_assert_rewrite("docker_helpers")


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory, _migrated_store):
    """A migrated sqlite store shared by the session: ``(folder, uri)``.

    ``folder`` holds ``mlflow.db``; run a test from it (``monkeypatch.chdir``) to use it as
    the default store ``sqlite:///mlflow.db``. Tests isolate themselves with their own
    experiment names.
    """
    import contextlib
    import shutil

    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow-store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    shutil.copyfile(_migrated_store, folder / "mlflow.db")
    with contextlib.chdir(folder):  # the store's artifact folder (./mlruns) is fixed here
        MlflowClient(uri).search_experiments(max_results=1)
    return folder, uri


@pytest.fixture(scope="session")
def _migrated_store(tmp_path_factory):
    """A new sqlite store as dlsched creates one (MLflow's tables migrated to the latest
    revision, write-ahead log, no experiment yet), made once per session to be copied."""
    from dlsched.runs.tracking.store import _create_sqlite

    path = tmp_path_factory.mktemp("mlflow-migrated") / "mlflow.db"
    _create_sqlite(path)
    return path


@pytest.fixture
def new_sqlite_store(_migrated_store):
    """Put a new sqlite store in a folder, as dlsched's creation of a store leaves it, without
    migrating MLflow's schema again: ``make(folder) -> path`` of ``folder/mlflow.db``.

    For a test that needs a store of its own but is not about creating one; a test about the
    creation or migration of a store lets ``dlsched`` make it.
    """
    import shutil

    def make(folder):
        path = folder / "mlflow.db"
        shutil.copyfile(_migrated_store, path)
        return path

    return make


@pytest.fixture
def new_experiment(mlflow_store, monkeypatch, tmp_path):
    """The session's sqlite store as the environment's tracking URI, the test run from its
    ``tmp_path``: a fresh experiment name."""
    import uuid

    _, uri = mlflow_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return f"experiment-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stored_episode():
    """Make an episode as ``dlsched compare`` reads it back from a store, without a store:
    ``make(policy, *, evaluation, started, seed, kind, **metrics) -> StoredEpisode``.

    ``metrics`` are the episode's ``EpisodeMetrics`` (its return 0 unless given); the episode
    is of ``evaluation`` (an evaluation id), started at ``started`` (ms), of ``seed``, on a
    scenario of jobs of ``kind`` (``JobKind`` inference by default) on the replay backend.
    """
    from dlsched.envs.scenarios.model import JobKind
    from dlsched.runs.evaluation import EpisodeMetrics, EpisodeScore, PolicyIdentity
    from dlsched.runs.tracking.stored_runs import StoredEpisode

    def make(
        policy,
        *,
        evaluation="s-20260101-000000-aaaaaa",
        started=1,
        seed=0,
        kind=JobKind.INFERENCE,
        **metrics,
    ):
        return StoredEpisode(
            run_id=f"{evaluation}-{policy}-{seed}",
            evaluation_id=evaluation,
            started_ms=started,
            experiment="e",
            scenario="s",
            scenario_hash="h",
            kind=kind,
            backend="replay",
            score=EpisodeScore(
                PolicyIdentity(policy), seed, EpisodeMetrics(**{"episode_return": 0.0, **metrics})
            ),
        )

    return make


@pytest.fixture
def mlflow_server_factory(tmp_path, new_sqlite_store):
    """Start MLflow tracking servers on loopback: ``start(port=None, backend_db=None) -> (uri,
    process, backend_db)``; pass the ``port`` and ``backend_db`` of a server that stopped to
    start it again on them.

    Each server has its own new sqlite backend store (``new_sqlite_store``: the server would
    only migrate it as it starts) and artifact folder under ``tmp_path``; every server still
    running at the end of the test is stopped (its process group, by id). The servers run no
    job executor (MLflow's background jobs, which dlsched never asks for): one process fewer
    importing MLflow as a server starts.
    """
    import contextlib
    import os
    import signal
    import socket
    import sqlite3
    import subprocess
    import sys
    import time
    import urllib.request

    started = []

    def start(port=None, backend_db=None):
        if port is None:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        if backend_db is None:
            folder = tmp_path / f"server-{port}"
            folder.mkdir()
            backend_db = new_sqlite_store(folder)
            # in sqlite's default journal mode, as the server's own migration leaves a store
            with contextlib.closing(sqlite3.connect(backend_db)) as db:
                db.execute("PRAGMA journal_mode=DELETE")
        folder = backend_db.parent
        log = (folder / "server.log").open("a")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{backend_db}",
                "--artifacts-destination",
                str(folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        started.append(process)
        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"mlflow server exited {process.returncode}: "
                    f"{(folder / 'server.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"mlflow server on {uri} did not answer within 120 s")
                time.sleep(0.05)
        return uri, process, backend_db

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# --- docker ---
# A test that needs the engine takes ``docker_engine``; one that runs workload containers takes
# ``workload_image`` too. Without a reachable engine such tests are skipped, unless
# DLSCHED_REQUIRE_DOCKER=1 (CI with an engine), where they fail instead of hiding the outage.


def _docker_required() -> bool:
    import os

    return os.environ.get("DLSCHED_REQUIRE_DOCKER", "") == "1"


@pytest.fixture(scope="session")
def docker_engine():
    """A ``docker.DockerClient`` of the engine DOCKER_HOST names (the local socket by default)."""
    from dlsched.envs.docker.engine import connect
    from dlsched.envs.errors import DockerUnavailableError

    try:
        client = connect(timeout_s=600)
    except DockerUnavailableError as error:
        if _docker_required():
            pytest.fail(f"DLSCHED_REQUIRE_DOCKER=1 but {error}")
        pytest.skip(f"no Docker engine: {error}")
    yield client
    client.close()


@pytest.fixture
def containers_left_behind(docker_engine):
    """A function listing the dlsched containers this process created since the test began and
    still there.

    Other sessions may share the engine, and an earlier test may have failed with containers
    up: a test answers for its own. Only containers whose owner labels name this process count
    (``dlsched.owner.host``, ``.pid``, ``.started``, as :class:`ProcessOwner` writes them), so
    another pytest session's containers on the shared engine never do.
    """
    from dlsched.envs.docker.containers import LABEL_OWNER, MANAGED_FILTER
    from dlsched.envs.owner import ProcessOwner

    owner = ProcessOwner.current().as_labels(LABEL_OWNER)
    mine = {"label": [MANAGED_FILTER, *(f"{key}={value}" for key, value in owner.items())]}
    before = {
        c.id for c in docker_engine.containers.list(all=True, ignore_removed=True, filters=mine)
    }

    def left_behind() -> list[str]:
        now = docker_engine.containers.list(all=True, ignore_removed=True, filters=mine)
        return [container.name for container in now if container.id not in before]

    return left_behind


@pytest.fixture(scope="session")
def workload_image(docker_engine):
    """The tag of the workload image on ``docker_engine``, built offline if it is not there."""
    from dlsched.envs.docker.image import build_image

    return build_image(docker_engine, offline=True).tag


@pytest.fixture(scope="session")
def local_engines(docker_engine, workload_image):
    """Two extra local engines standing for two hosts: their ``EngineStart`` records.

    Started once per session (``dlsched docker engines up``, the workload image copied from
    ``docker_engine``); the ones this fixture started are stopped at its end, engines that ran
    already are left running. Skipped where engines cannot be started (not root, no dockerd),
    failed instead when DLSCHED_REQUIRE_DOCKER=1. A test that stops one starts it again.
    """
    import os
    import shutil

    from dlsched.envs.docker import local_engines as engines
    from dlsched.envs.errors import BackendError

    why_not = None
    if os.geteuid() != 0:
        why_not = "starting Docker engines needs root"
    elif shutil.which("dockerd") is None:
        why_not = "no dockerd on PATH"
    if why_not is not None:
        if _docker_required():
            pytest.fail(f"DLSCHED_REQUIRE_DOCKER=1 but {why_not}")
        pytest.skip(why_not)
    try:
        started = engines.up(2, report=print)
    except BackendError as error:
        pytest.fail(f"could not start 2 local engines: {error}")
    yield started
    for start in started:
        if not start.reused:
            engines.stop(start.engine)


# --- cli ---


@pytest.fixture
def evaluated_labels(capsys):
    """Run ``dlsched evaluate`` on one untracked episode: ``evaluate(scenario, policy, uri) ->
    labels``, the labels of the policies it summarised (``policy`` a spec such as a model's
    URI, resolved through tracking URI ``uri``). The test fails with its stderr unless it exits
    with 0."""
    import json

    from dlsched.runs.cli import main

    def evaluate(scenario, policy, uri):
        code = main([
            "evaluate", "--scenario", str(scenario), "--policy", policy, "--episodes", "1",
            "--tracking-uri", uri, "--no-tracking", "--no-progress", "--json",
        ])  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0, err
        (summary,) = json.loads(out)["scenarios"]
        return [summarised["label"] for summarised in summary["policies"]]

    return evaluate


# --- reliability ---
# dlsched commands run as a user runs them: separate processes, stopped with real signals.
# ``dlsched_process`` starts one; every process still running at the end of the test is killed.


def _default_sigint():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def default_sigint():
    """A ``preexec_fn`` that gives a child process SIGINT's default action.

    A process started in the background of a non-interactive shell (``pytest ... &``, some CI
    runners) ignores SIGINT, and its children inherit that: Python then installs no
    KeyboardInterrupt handler, and a test that stops a child with SIGINT waits for ever (the
    hang once seen under the full suite).
    """
    return _default_sigint


@pytest.fixture
def python_process():
    """Start ``python ARGS`` in its own process, SIGINT at its default action: ``start(args,
    **popen) -> Popen`` (``popen``: more ``subprocess.Popen`` settings, ``cwd``, ``env``...).

    stdout and stderr are pipes (text). Every process still running at the end of the test is
    killed.
    """
    import subprocess
    import sys

    started = []

    def start(args, **popen):
        process = subprocess.Popen(
            [sys.executable, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_sigint,
            **popen,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture
def dlsched_process(python_process):
    """Start ``dlsched ARGS`` in its own process: ``start(args, cwd, env=None) -> Popen``.

    stdout and stderr are pipes (text); ``env`` adds to this process's environment (without
    ``MLFLOW_TRACKING_URI``, so that each test says where it tracks).
    """
    import os

    def start(args, cwd, env=None):
        environment = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        environment.update(env or {})
        return python_process(["-m", "dlsched.runs.cli", *args], cwd=cwd, env=environment)

    return start


@pytest.fixture
def episode_process(python_process):
    """Run a Python program that starts an episode and prints its id first (as
    ``docker_helpers.interrupted_episode_script`` writes one): ``start(script) -> (Popen,
    episode)``. The test fails with the program's stderr if it printed no id.
    """

    def start(script):
        process = python_process(["-c", script])
        episode = process.stdout.readline().strip()
        assert episode, process.stderr.read()
        return process, episode

    return start


# --- torch ---
# The learned policies' networks are tiny: a forward pass on torch's default thread pool (one
# thread per core) spends most of its time handing work between threads, many times longer than
# on one thread when the machine is busy, as CI's 2 cores are. `dlsched train` runs one thread by
# default (--torch-threads 1) for the same reason. Child processes keep torch's default.


@pytest.fixture(scope="session", autouse=True)
def torch_on_one_thread():
    """torch on one thread in the test process, where torch is installed."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
