"""The episode writer: episodes logged beside the evaluation, by a forked child or a thread."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.runs.evaluation import EpisodeResult
from dlsched.runs.tracking import episode_writer
from dlsched.runs.tracking.store import connect
from dlsched.runs.tracking.target import ENV_VAR, TrackingTarget
from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_tracked
from dlsched.runs.tracking.trajectory import EvaluationFolder

HORIZON_S = 60.0


@pytest.mark.parametrize(
    ("uri", "forked"),
    [
        ("sqlite:////tmp/x/mlflow.db", True),
        ("sqlite:///mlflow.db", True),
        ("sqlite://", False),  # in memory: this process's alone
        ("sqlite:///:memory:", False),
        ("http://127.0.0.1:5000", False),  # the server does the work: a thread waits on it
        ("file:///tmp/x/mlruns", False),
    ],
)
def test_only_a_sqlite_file_is_logged_from_a_forked_child(uri: str, forked: bool) -> None:
    assert episode_writer._forkable(uri) is forked


def _scenario(horizon_s: float = HORIZON_S) -> Scenario:
    return dataclasses.replace(load_scenario("dqoes-resnet50-burst-target40"), horizon_s=horizon_s)


def _evaluate(
    uri: str,
    out: Path,
    episode_plots: bool = False,
    seeds: tuple[int, ...] = (0, 1),
    horizon_s: float = HORIZON_S,
):
    policies = (make("default"), make("dqoes"))
    request = EvaluationRequest(_scenario(horizon_s), policies, seeds, "replay")
    target = TrackingTarget(uri, "--tracking-uri")
    return evaluate_tracked(
        request,
        connect(target),
        target,
        out,
        progress=False,
        episode_plots=episode_plots,
        keep_results=True,
    )


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
def test_every_episode_is_logged_finished_under_the_evaluating_process(
    monkeypatch, tmp_path: Path, new_sqlite_store, scheme: str
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses it otherwise
    monkeypatch.chdir(tmp_path)  # a sqlite store's artifacts go beside it
    uri = (
        f"sqlite:///{new_sqlite_store(tmp_path)}"
        if scheme == "sqlite"
        else (tmp_path / "mlruns").as_uri()
    )
    outcome = _evaluate(uri, tmp_path / "out", episode_plots=True)

    assert outcome.failure is None
    runs = outcome.location.episode_runs
    assert sorted(runs) == ["default-seed0", "default-seed1", "dqoes-seed0", "dqoes-seed1"]
    client = MlflowClient(uri)
    for name, run_id in runs.items():
        run = client.get_run(run_id)
        assert run.info.run_name == name and run.info.status == "FINISHED"
        # logged by the writer, owned by the evaluation: if it dies, the next command ends them
        assert run.data.tags["dlsched.owner.pid"] == str(os.getpid())
        artifacts = {info.path for info in client.list_artifacts(run_id)}
        assert {"latency.png", "limits.png", "trajectory.csv"} <= artifacts
    parent = client.get_run(outcome.location.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert "timeline.png" in {info.path for info in client.list_artifacts(parent.info.run_id)}


def test_a_writer_stuck_on_a_lock_held_at_the_fork_is_stopped_and_its_run_marked(
    monkeypatch, tmp_path: Path, new_sqlite_store
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    new_sqlite_store(tmp_path)
    _deadlock_writer_at(monkeypatch, "dqoes", 1)  # the last episode
    monkeypatch.setattr(episode_writer, "STALL_TIMEOUT_S", 3.0)
    started = time.monotonic()
    outcome = _evaluate(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out")

    assert time.monotonic() - started < 60
    said = str(outcome.failure)
    assert "the process logging the episodes said nothing for 3 s and was stopped" in said
    assert "1 episode run(s) it left RUNNING marked KILLED (stuck)" in said
    assert f"dlsched runs sync {tmp_path / 'out'}" in said
    assert multiprocessing.active_children() == []  # the child is gone
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = client.search_experiments(filter_string="name != 'Default'")
    runs = client.search_runs([experiment.experiment_id], "tags.`dlsched.kind` = 'episode'")
    assert sorted((run.info.run_name, run.info.status) for run in runs) == [
        ("default-seed0", "FINISHED"),
        ("default-seed1", "FINISHED"),
        ("dqoes-seed0", "FINISHED"),
        ("stuck", "KILLED"),
    ]


# --- a writer stuck in the middle of the evaluation, behind a full pipe
#: A 600 s episode is about 70 KB pickled: a few fill the pipe (a socket pair's send buffer).
LONG_HORIZON_S = 600.0


def _pipe_capacity() -> int:
    first, second = socket.socketpair()  # what multiprocessing.Pipe(duplex=True) is
    with first, second:
        return first.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def _pickled_size(result: EpisodeResult) -> int:
    return len(pickle.dumps(episode_writer.EpisodeJob(result, Path(), plots=False, log=True)))


def _no_writer_left() -> bool:
    threads = {thread.name for thread in threading.enumerate()}
    return multiprocessing.active_children() == [] and not threads & {
        "dlsched-episode-courier",
        "dlsched-episode-writer",
    }


def test_an_evaluation_goes_on_past_a_writer_stuck_mid_way_behind_a_full_pipe(
    monkeypatch, tmp_path: Path, new_sqlite_store
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    # the child stops at default's second episode, reading no more, while the evaluation hands
    # it six more
    _deadlock_writer_at(monkeypatch, "default", 1)
    monkeypatch.setattr(episode_writer, "STALL_TIMEOUT_S", 2.0)
    uri = f"sqlite:///{new_sqlite_store(tmp_path)}"
    # without the courier, the evaluation blocked in a send for ever (the test timed out)
    outcome = _evaluate(uri, tmp_path / "out", seeds=(0, 1, 2, 3), horizon_s=LONG_HORIZON_S)

    # the premise: what came after the stuck episode is more than the pipe holds
    assert sum(_pickled_size(result) for result in outcome.results[2:]) > _pipe_capacity()
    said = str(outcome.failure)
    assert "the process logging the episodes said nothing for 2 s and was stopped" in said
    assert "1 episode run(s) it left RUNNING marked KILLED (stuck)" in said
    assert f"dlsched runs sync {tmp_path / 'out'}" in said
    assert _no_writer_left()
    folder = EvaluationFolder(Path(outcome.location.local_folder))
    assert [path.name for path in folder.episode_dirs()] == [
        f"{policy}-seed{seed}" for policy in ("default", "dqoes") for seed in range(4)
    ]
    client = MlflowClient(uri)
    (experiment,) = client.search_experiments(filter_string="name != 'Default'")
    runs = client.search_runs([experiment.experiment_id], "tags.`dlsched.kind` = 'episode'")
    assert sorted((run.info.run_name, run.info.status) for run in runs) == [
        ("default-seed0", "FINISHED"),
        ("stuck", "KILLED"),
    ]
    assert outcome.location.episode_runs.keys() == {"default-seed0"}


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
def test_a_writer_silent_with_episodes_in_hand_is_stopped_while_they_are_handed_over(
    monkeypatch, tmp_path: Path, mlflow_store, scheme: str
) -> None:
    from dlsched.runs.evaluation import evaluate

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = mlflow_store[1] if scheme == "sqlite" else (tmp_path / "mlruns").as_uri()
    held = threading.Lock()
    held.acquire()  # a forked child's copy stays held; a thread is let go at the end

    def deadlocked(*args, **kwargs):
        held.acquire()
        raise RuntimeError("let go")

    monkeypatch.setattr(episode_writer, "log_episode_run", deadlocked)
    results = evaluate(_scenario(LONG_HORIZON_S), [make("default")], range(8), progress=False)
    assert sum(_pickled_size(result) for result in results[1:]) > _pipe_capacity()
    context = episode_writer.EpisodeRunContext(uri, "0", "parent", "evaluation", "0", None, {})
    writer = episode_writer.EpisodeWriter.start(MlflowClient(uri), context, stall_timeout_s=1.0)
    kind = "process" if scheme == "sqlite" else "thread"
    try:
        replies = []
        for result in results:  # the first one blocks the writer; none blocks the hand-over
            job = episode_writer.EpisodeJob(result, tmp_path, plots=False, log=True)
            replies += writer.submit(job)
        while not replies:  # said by the evaluation's own calls, not only when it closes
            time.sleep(0.05)
            replies += writer.replies()

        (stopped,) = replies
        assert isinstance(stopped, episode_writer.WriterFailed) and stopped.stopped
        assert f"the {kind} logging the episodes said nothing for 1 s and was stopped" in (
            stopped.what
        )
        assert writer.submit(job) == []  # nothing more is handed over
        assert writer.close() == []
    finally:
        held.release()
    # a stopped thread, once let go, hears that the evaluation hung up, and ends
    for thread in threading.enumerate():
        if thread.name == "dlsched-episode-writer":
            thread.join(timeout=60)
    assert _no_writer_left()


def test_a_writer_that_only_draws_after_the_store_failed_is_not_taken_for_stuck(
    monkeypatch, tmp_path: Path, new_sqlite_store
) -> None:
    from mlflow.exceptions import MlflowException

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)

    def refused(*args, **kwargs):
        raise MlflowException("database is locked")

    def slow_plots(result, default, folder: Path) -> None:
        time.sleep(0.5)  # each episode within the stall timeout, all of them far beyond it
        (folder / "plotted").touch()

    monkeypatch.setattr(episode_writer, "log_episode_run", refused)
    monkeypatch.setattr(episode_writer, "plot_episode", slow_plots)
    monkeypatch.setattr(episode_writer, "STALL_TIMEOUT_S", 2.0)
    outcome = _evaluate(
        f"sqlite:///{new_sqlite_store(tmp_path)}", tmp_path / "out", episode_plots=True,
        seeds=(0, 1, 2, 3, 4),
    )  # fmt: skip

    said = str(outcome.failure)
    assert "logging episode default-seed0 failed: database is locked" in said
    assert "said nothing" not in said
    folder = EvaluationFolder(Path(outcome.location.local_folder))
    episodes = folder.episode_dirs()
    assert len(episodes) == 10
    assert all((episode / "plotted").is_file() for episode in episodes)  # none cut short
    assert _no_writer_left()


@pytest.fixture
def sigint_delivered() -> Iterator[None]:
    """SIGINT handled as a terminal's Ctrl-C is: a command whose SIGINT is ignored (started in
    the background by a script, or under nohup) rightly keeps ignoring it, whatever ran pytest."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_delivered")
def test_a_close_cut_short_by_a_signal_is_resumed_and_leaves_no_writer(
    monkeypatch, tmp_path: Path, mlflow_store
) -> None:
    from mlflow.exceptions import MlflowException

    from dlsched.runs.evaluation import evaluate
    from dlsched.runs.interruption import Interrupted, interruptible

    let_go = multiprocessing.get_context("fork").Event()  # shared with the forked writer

    def busy(*args, **kwargs):
        let_go.wait(60)
        raise MlflowException("database is locked")

    monkeypatch.setattr(episode_writer, "log_episode_run", busy)
    (result,) = evaluate(_scenario(), [make("default")], [0], progress=False)
    uri = mlflow_store[1]
    context = episode_writer.EpisodeRunContext(uri, "0", "parent", "evaluation", "0", None, {})
    writer = episode_writer.EpisodeWriter.start(MlflowClient(uri), context)
    writer.submit(episode_writer.EpisodeJob(result, tmp_path, plots=False, log=True))
    with interruptible():
        # Ctrl-C while the evaluation waits for the writer at its end
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(Interrupted):
            writer.close()
        let_go.set()
        replies = writer.close(hurry=True)  # what the tracker's __exit__ does

    assert [reply.what for reply in replies if isinstance(reply, episode_writer.WriterFailed)] == [
        "logging episode default-seed0 failed: database is locked"
    ]
    assert writer.closed
    assert _no_writer_left()  # before, the child waited on the pipe for ever


def _deadlock_writer_at(monkeypatch: pytest.MonkeyPatch, policy: str, seed: int) -> None:
    """Make the writer start ``policy``'s episode of ``seed`` as a run and then wait for ever on
    a lock held when it is forked, as a library's thread may hold one: the child's copy stays
    held for ever."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    from dlsched.runs.tracking.run_logging import TAG_EVALUATION, TAG_KIND

    held = threading.Lock()
    held.acquire()
    log_episode_run = episode_writer.log_episode_run

    def deadlocked(client, experiment_id, parent_run_id, evaluation_id, result, *args, **kwargs):
        if (result.policy.name, result.seed) == (policy, seed):
            tags = {MLFLOW_PARENT_RUN_ID: parent_run_id, TAG_KIND: "episode",
                    TAG_EVALUATION: evaluation_id}  # fmt: skip
            client.create_run(experiment_id, run_name="stuck", tags=tags)
            held.acquire()
        return log_episode_run(
            client, experiment_id, parent_run_id, evaluation_id, result, *args, **kwargs
        )

    monkeypatch.setattr(episode_writer, "log_episode_run", deadlocked)
