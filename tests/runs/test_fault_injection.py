"""Fault injection: SIGINT, SIGTERM and SIGKILL at every point of a command's life; a disk that
fills, and a folder that is read-only.

Real ``dlsched`` processes on a new sqlite store (made by the command where the stop is about
its creation, copied in place already migrated otherwise), and the real Docker engine for the
cases marked ``docker``, each stopped at one point it reaches: before its store exists, in the
store's migration, among its episodes, while its episodes are uploaded, as it ends, during a
``dlsched runs sync`` (alone, and beside another sync of the same folder), in a Docker episode
and at its close. The point is found from the command's own progress (its output lines, the
files and runs it makes), never from a fixed delay. After each stop the invariants every stop
must keep are checked (:func:`assert_invariants`):

- a stopped command (SIGINT, SIGTERM) exits ``128 + signal`` with one line and no traceback;
- no container of it is left after one ``dlsched docker cleanup``;
- no run is ``RUNNING`` after one more command (``dlsched runs repair``);
- the store is whole: it opens, its schema is at MLflow's head, no ``_alembic_tmp_*`` table;
- no episode is lost or counted twice: after ``dlsched runs sync``, every episode on disk has
  exactly one finished run.

A full disk and a read-only folder (tmpfs mounts, so these need root and are skipped without)
must end a command with exit code 2 and one line, leave nothing ``RUNNING`` after one more
command, and leave nothing behind but what ``dlsched runs sync`` needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow.store.db.utils import _get_latest_schema_revision

from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_OWNER
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.runs.cli import main
from dlsched.runs.tracking.owners import OWNER_TAG_PREFIX
from dlsched.runs.tracking.run_logging import TAG_EVALUATION, TAG_KIND
from dlsched.runs.tracking.store import creation_file
from dlsched.runs.tracking.trajectory import TRACKING_FILE, read_tracking

#: The longest any point of a command's life is waited for.
WAIT_S = 120.0
#: Episodes of a replay evaluation: enough that the episode writer is still uploading when
#: the last one is on disk.
EPISODES = 8
STEP = re.compile(r"\| *(\d+)/(\d+) \[")


def _name(signum: int) -> str:
    return signal.Signals(signum).name


@dataclasses.dataclass
class Watched:
    """A ``dlsched`` process and everything it printed so far, read as it comes."""

    process: subprocess.Popen[str]
    folder: Path
    out: list[str] = dataclasses.field(default_factory=list)
    err: list[str] = dataclasses.field(default_factory=list)
    readers: list[threading.Thread] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err)):
            # universal newlines: each ``\\r`` of a progress bar ends a line
            reader = threading.Thread(target=_read, args=(stream, lines), daemon=True)
            reader.start()
            self.readers.append(reader)

    def wait_for(self, reached: Callable[[], object], what: str) -> None:
        """Wait until ``reached()`` is true; fail if the process ends first or after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while not reached():
            if self.process.poll() is not None:
                pytest.fail(f"the command ended ({self.process.returncode}) before {what}: "
                            f"{''.join(self.err)[-2000:]}")  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"waited {WAIT_S:.0f} s for {what}")
            time.sleep(0.005)

    def printed(self, text: str) -> bool:
        return any(text in line for line in (*self.err, *self.out))

    def stop(self, signum: int) -> int:
        """Send ``signum`` and wait for the process to end; its exit code."""
        self.process.send_signal(signum)
        code = self.process.wait(timeout=WAIT_S)
        for reader in self.readers:
            reader.join(timeout=WAIT_S)
        return code


def _read(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


def _scenario(folder: Path) -> Path:
    scenario = dataclasses.replace(load_scenario("dqoes-varied-burst"), horizon_s=300.0)
    path = folder / "scenario.yaml"
    path.write_text(dump_scenario(scenario))
    return path


def _store(folder: Path) -> Path:
    return folder / "mlflow.db"


def _uri(folder: Path) -> str:
    # absolute: MLflow caches a store by its URI, and a relative one names another test's
    return f"sqlite:///{_store(folder)}"


def _evaluate(dlsched_process, folder: Path, *options: str, episodes: int = EPISODES) -> Watched:
    process = dlsched_process(
        ["evaluate", "--scenario", _scenario(folder), "--policy", "default",
         "--episodes", episodes, "--no-plots", *options],
        cwd=folder,
        env={"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    return Watched(process, folder)


def _episodes_on_disk(folder: Path) -> int:
    return len(list(folder.glob("dlsched-runs/*/*/episode.json")))


def _episodes_uploaded(folder: Path) -> int:
    return len(list(folder.glob("mlruns/*/*/artifacts/episode.json")))


def _rows(path: Path, query: str) -> list[tuple]:
    """The rows of ``query`` on a sqlite file, read without writing."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute(query).fetchall()


def _revisions(path: Path) -> list[str]:
    """The schema revisions of a store (MLflow's migrations applied so far)."""
    return [row[0] for row in _rows(path, "select version_num from alembic_version")]


def _migrating(folder: Path) -> bool:
    """Whether a store file in ``folder`` (the store, or the file it is made in) is part-way
    through MLflow's migrations."""
    for path in folder.glob("mlflow.db*"):
        if path.name.endswith(("-wal", "-shm", "-journal", ".lock")):
            continue
        with contextlib.suppress(sqlite3.Error):  # no revision yet, or being written
            if _revisions(path) not in ([], [_get_latest_schema_revision()]):
                return True
    return False


def _owned_containers(client, pid: int) -> list:
    return client.containers.list(
        all=True, ignore_removed=True, filters={"label": [f"{LABEL_OWNER}.pid={pid}"]}
    )


# ------------------------------------------------------------------------------- invariants


def assert_stopped(watched: Watched, code: int, signum: int, command: str = "evaluate") -> str:
    """A command stopped by ``signum``: SIGKILL leaves no word; SIGINT and SIGTERM exit
    ``128 + signal`` with one line saying so, and no traceback. That line, if any."""
    print(f"stopped by {_name(signum)}: exit {code}")  # for -rP: the outcome of each trial
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL
        return ""
    err = "".join(watched.err)
    if code == -signum:  # it came after the command's last line, as Python shut down
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert _work_done(watched, command), err
        return ""
    assert code == 128 + signum, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    said = [line for line in watched.err if "interrupted" in line]
    print(*said)
    assert len(said) == 1, err
    assert said[0].startswith(f"dlsched {command}: interrupted ({_name(signum)})")
    return said[0].strip()


def _work_done(watched: Watched, command: str) -> bool:
    """Whether a command printed its last line: an evaluation its summary, a sync its count."""
    last = "x default" if command == "evaluate" else "; status "
    return watched.printed(last)


def assert_invariants(monkeypatch, folder: Path, engine=None, pid: int = 0) -> None:
    """What every stop must leave: see the module docstring. ``engine``, ``pid``: the Docker
    engine and the stopped process, whose containers one cleanup must remove."""
    monkeypatch.chdir(folder)  # where the commands write their logs
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    if engine is not None:
        left = _owned_containers(engine, pid)
        for episode in {container.labels[LABEL_EPISODE] for container in left}:
            assert main(["docker", "cleanup", "--episode", episode]) == 0
        assert _owned_containers(engine, pid) == []
    assert main(["runs", "repair", "--tracking-uri", _uri(folder)]) == 0  # one more command
    client = MlflowClient(_uri(folder))
    experiments = [e.experiment_id for e in client.search_experiments()]
    running = client.search_runs(experiments, "attributes.status = 'RUNNING'")
    assert running == []
    assert _revisions(_store(folder)) == [_get_latest_schema_revision()]
    names = [name for (name,) in _rows(_store(folder), "select name from sqlite_master")]
    assert not [name for name in names if name.startswith("_alembic_tmp_")]
    for evaluation in {path.parent.parent for path in folder.glob("dlsched-runs/*/*/episode.json")}:
        assert (evaluation / TRACKING_FILE).is_file()  # else its episodes could never be synced
        assert main(["runs", "sync", str(evaluation)]) == 0
        assert_each_episode_once(client, evaluation)


def assert_each_episode_once(client: MlflowClient, evaluation: Path) -> None:
    """Every episode on disk has exactly one finished run in the store, and no other has."""
    record = read_tracking(evaluation)
    query = (
        f"tags.`{TAG_EVALUATION}` = '{record.name}' and tags.`{TAG_KIND}` = 'episode' "
        "and attributes.status = 'FINISHED'"
    )
    runs = client.search_runs([record.experiment_id], query, ViewType.ACTIVE_ONLY, 10_000)
    on_disk = Counter(path.parent.name for path in evaluation.glob("*/episode.json"))
    assert Counter(run.info.run_name for run in runs) == on_disk


# ------------------------------------------------------------------------------- replay


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=_name)
def test_a_stop_before_the_store_exists(monkeypatch, tmp_path, dlsched_process, signum):
    watched = _evaluate(dlsched_process, tmp_path)
    watched.wait_for(lambda: watched.printed("tracking: "), "the store's URI")  # then it opens it
    said = assert_stopped(watched, watched.stop(signum), signum)
    if signum == signal.SIGINT:  # issue 35 item 8: it said containers and runs were ended
        assert said == (
            "dlsched evaluate: interrupted (SIGINT); no container or run was left running: "
            "nothing to clean up"
        )
    assert_invariants(monkeypatch, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=_name)
def test_a_stop_in_the_migration_of_a_new_store(monkeypatch, tmp_path, dlsched_process, signum):
    """The store appears whole or not at all (it is migrated in a file of its own); a stopped
    command removes that file, a killed one leaves it to the next command."""
    watched = _evaluate(dlsched_process, tmp_path)
    store = _store(tmp_path)
    # The file it is migrated in, or a partly migrated store: a poll may see neither of the
    # revisions between the first and the last (a CI run saw the command end first), but the
    # file lives as long as the whole migration.
    watched.wait_for(
        lambda: creation_file(store).exists() or _migrating(tmp_path), "the store's migration"
    )
    assert_stopped(watched, watched.stop(signum), signum)
    assert not store.exists() or _revisions(store) == [_get_latest_schema_revision()]
    assert creation_file(store).exists() == (signum == signal.SIGKILL)
    assert_invariants(monkeypatch, tmp_path)
    assert not creation_file(store).exists()


def test_a_stop_among_the_episodes(monkeypatch, tmp_path, dlsched_process, new_sqlite_store):
    new_sqlite_store(tmp_path)
    watched = _evaluate(dlsched_process, tmp_path, "--single-env")
    watched.wait_for(lambda: _episodes_on_disk(tmp_path) >= 1, "the first episode")
    assert_stopped(watched, watched.stop(signal.SIGTERM), signal.SIGTERM)
    assert_invariants(monkeypatch, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=_name)
def test_a_stop_while_episodes_are_uploaded(
    monkeypatch, tmp_path, dlsched_process, new_sqlite_store, signum
):
    """The episode writer (a forked child) is logging an episode: SIGKILL takes it down with
    the evaluation, in the middle of a run."""
    new_sqlite_store(tmp_path)
    watched = _evaluate(dlsched_process, tmp_path)
    watched.wait_for(lambda: _episodes_uploaded(tmp_path) >= 1, "the first episode's upload")
    assert_stopped(watched, watched.stop(signum), signum)
    assert_invariants(monkeypatch, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=_name)
def test_a_stop_as_the_evaluation_ends_is_honoured_in_one_line(
    monkeypatch, tmp_path, dlsched_process, new_sqlite_store, signum
):
    """Issue 35 item 6: the end of an evaluation frees the store's objects, and a SIGINT then
    landed in SQLAlchemy's weakref callback, where Python prints it and drops it: the command
    went on and exited 0."""
    new_sqlite_store(tmp_path)
    watched = _evaluate(dlsched_process, tmp_path, "--single-env")
    watched.wait_for(lambda: _episodes_on_disk(tmp_path) == EPISODES, "the last episode")
    assert_stopped(watched, watched.stop(signum), signum)
    assert_invariants(monkeypatch, tmp_path)


# ------------------------------------------------------------------------------- runs sync


def _folder_to_sync(dlsched_process, folder: Path) -> Path:
    """An evaluation killed once all its episodes are on disk (run at once), most of them not
    uploaded yet: the folder ``dlsched runs sync`` uploads."""
    watched = _evaluate(dlsched_process, folder)
    watched.wait_for(lambda: _episodes_on_disk(folder) == EPISODES, "the last episode")
    watched.stop(signal.SIGKILL)
    assert _episodes_uploaded(folder) < EPISODES - 2
    (evaluation,) = folder.glob("dlsched-runs/*/tracking.json")
    return evaluation.parent


def _sync(dlsched_process, folder: Path, evaluation: Path) -> Watched:
    process = dlsched_process(
        ["runs", "sync", evaluation], cwd=folder, env={"PYTHONUNBUFFERED": "1"}
    )
    return Watched(process, folder)


def _episode_runs_of(folder: Path, pid: int) -> int:
    """The runs the process ``pid`` has created in the store of ``folder``."""
    with contextlib.closing(sqlite3.connect(f"file:{_store(folder)}?mode=ro", uri=True)) as db:
        query = "select count(*) from tags where key = ? and value = ?"
        return int(db.execute(query, (f"{OWNER_TAG_PREFIX}.pid", str(pid))).fetchone()[0])


def test_syncs_stopped_as_they_upload_leave_every_episode_once(
    monkeypatch, tmp_path, dlsched_process, new_sqlite_store
):
    """A sync stopped (SIGINT) as it uploads; then two syncs of the folder at once, the one
    uploading killed (SIGKILL) while the other waits for it; then one more: every episode
    once (issue 35 item 4: two syncs at once uploaded the episodes twice)."""
    new_sqlite_store(tmp_path)
    evaluation = _folder_to_sync(dlsched_process, tmp_path)
    uploaded = _episodes_uploaded(tmp_path)
    watched = _sync(dlsched_process, tmp_path, evaluation)
    watched.wait_for(lambda: _episodes_uploaded(tmp_path) > uploaded, "an upload")
    assert_stopped(watched, watched.stop(signal.SIGINT), signal.SIGINT, "runs")
    both = (
        _sync(dlsched_process, tmp_path, evaluation),
        _sync(dlsched_process, tmp_path, evaluation),
    )

    def uploading() -> Watched | None:
        """The sync that uploads while the other waits for it, once both are so."""
        for one, other in (both, both[::-1]):
            if _episode_runs_of(tmp_path, one.process.pid) and other.printed("waiting"):
                return one
        return None

    both[0].wait_for(uploading, "one sync uploading, the other waiting for it")
    first = uploading()
    assert first is not None
    (second,) = [sync for sync in both if sync is not first]
    assert_stopped(first, first.stop(signal.SIGKILL), signal.SIGKILL, "runs")
    assert second.process.wait(timeout=WAIT_S) == 0, "".join(second.err)
    assert_invariants(monkeypatch, tmp_path)


# ------------------------------------------------------------------------------- disks


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the test (root only: skipped without)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {mounted.stderr.strip()}")
    try:
        yield path
    finally:  # lazily: this process's MLflow clients may still hold the store open
        subprocess.run(["umount", "--lazy", str(path)], check=False)


def _remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def _ended(watched: Watched) -> tuple[int, str]:
    """Wait for a command to end by itself: its exit code and its stderr."""
    code = watched.process.wait(timeout=WAIT_S)
    for reader in watched.readers:
        reader.join(timeout=WAIT_S)
    return code, "".join(watched.err)


def assert_refused_in_one_line(code: int, err: str, *said: str) -> None:
    """Exit code 2, one error line saying each of ``said``, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    for words in said:
        assert words in errors[0], err


def _running(folder: Path) -> list:
    client = MlflowClient(_uri(folder))
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, "attributes.status = 'RUNNING'")


@pytest.mark.parametrize("then", ["sync", "evaluate"])
def test_a_full_disk_ends_the_evaluation_in_one_line_and_leaves_nothing_running(
    monkeypatch, tmp_path, dlsched_process, then
):
    """Issue 44 item 4: the working folder's disk (store, episodes, log) fills among the
    episodes. After the right message came a traceback (its log, on the same disk, could not be
    written either), the parent run stayed RUNNING, and once space was freed a sync left the
    half-written episode (``.writing/``) and its lock file (``sync.lock``) behind."""
    with _tmpfs(tmp_path / "disk", "2m") as disk:
        code, err = _ended(_evaluate(dlsched_process, disk, episodes=200))
        assert_refused_in_one_line(code, err, "No space left on device", "Free space there")
        _remount(disk, "size=64m")  # space is freed
        monkeypatch.chdir(disk)  # where the next command writes its log
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        (record,) = disk.glob("dlsched-runs/*/tracking.json")
        evaluation = record.parent
        if then == "sync":
            assert main(["runs", "sync", str(evaluation)]) == 0
            assert_each_episode_once(MlflowClient(_uri(disk)), evaluation)
        else:
            again = ["evaluate", "--scenario", str(disk / "scenario.yaml"), "--policy",
                     "default", "--episodes", "1", "--no-plots", "--no-progress"]  # fmt: skip
            assert main(again) == 0
        assert _running(disk) == []
        left = {path.name for path in evaluation.iterdir() if not path.name.startswith("default-")}
        assert left == {"scenario.yaml", "tracking.json"}  # no .writing/, no sync.lock


def test_a_read_only_runs_folder_refuses_the_evaluation_before_any_store(tmp_path, dlsched_process):
    """Issue 44 item 5: the runs folder (the records' and the log's) is read-only and the store
    is new. MLflow's first log message, in the store's creation, could not open the log file,
    which raised out of MLflow: two chained tracebacks, and an empty ``mlflow.db.lock`` left.
    As root a read-only mount does what a folder's mode cannot."""
    with _tmpfs(tmp_path / "dlsched-runs", "1m") as runs:
        _remount(runs, "ro")
        process = dlsched_process(
            ["evaluate", "--scenario", _scenario(tmp_path), "--policy", "default",
             "--episodes", 2, "--no-plots"],
            cwd=tmp_path,
        )  # fmt: skip
        _, err = process.communicate(timeout=WAIT_S)
        assert_refused_in_one_line(process.returncode, err, "dlsched-runs", "not writable")
        assert sorted(os.listdir(tmp_path)) == ["dlsched-runs", "scenario.yaml"]  # no store


# ------------------------------------------------------------------------------- docker


#: Steps of a Docker episode (a step a second).
DOCKER_STEPS = 4


def _docker_evaluation(dlsched_process, folder: Path, client, episodes: int) -> Watched:
    """A tracked Docker evaluation of ``episodes`` episodes of DOCKER_STEPS steps of one
    service, with its progress bar."""
    scenario = Scenario(
        name="test-fault-injection",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=float(client.info()["NCPU"])),),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=1, targets_s=(5.0,)),),
        interval_s=1.0,
        horizon_s=float(DOCKER_STEPS),
        slots_per_worker=1,
        profile_set="measured",
    )
    path = folder / "docker.yaml"
    path.write_text(dump_scenario(scenario))
    process = dlsched_process(
        ["evaluate", "--backend", "docker", "--scenario", path, "--policy", "default",
         "--episodes", episodes, "--no-plots", "--no-episode-plots"],
        cwd=folder,
        env={"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    return Watched(process, folder)


def _steps_done(watched: Watched) -> int:
    steps = [int(match.group(1)) for line in watched.err if (match := STEP.search(line))]
    return max(steps, default=0)


#: Where a Docker evaluation is stopped: a step of its first episode, its last step (the
#: episode closes: its containers are removed, it is written and handed over), its folder on
#: disk (the evaluation ends, or the next episode starts).
DOCKER_POINTS: dict[str, Callable[[Watched], bool]] = {
    "mid-episode": lambda watched: _steps_done(watched) >= 1,
    "at-its-last-step": lambda watched: _steps_done(watched) >= DOCKER_STEPS,
    "once-on-disk": lambda watched: _episodes_on_disk(watched.folder) >= 1,
}


@pytest.mark.docker
@pytest.mark.parametrize(
    ("signum", "point", "episodes"),
    [
        (signal.SIGKILL, "mid-episode", 1),
        (signal.SIGINT, "at-its-last-step", 1),
        (signal.SIGINT, "once-on-disk", 1),
        (signal.SIGTERM, "at-its-last-step", 2),
    ],
    ids=["SIGKILL-mid-episode", "SIGINT-at-its-last-step", "SIGINT-once-on-disk",
         "SIGTERM-at-the-first-of-two-last-step"],
)  # fmt: skip
def test_a_stopped_docker_evaluation(
    monkeypatch, tmp_path, docker_engine, workload_image, dlsched_process, new_sqlite_store,
    signum, point, episodes,
):  # fmt: skip
    """Stopped at ``point`` of its first episode. Issue 35 item 6: a Ctrl-C as an episode
    closed landed in SQLAlchemy's weakref callback, was dropped, and the command exited 0;
    with an episode to come, the stop must end the evaluation before that episode does."""
    new_sqlite_store(tmp_path)
    watched = _docker_evaluation(dlsched_process, tmp_path, docker_engine, episodes)
    try:
        watched.wait_for(lambda: DOCKER_POINTS[point](watched), point)
        assert_stopped(watched, watched.stop(signum), signum)
        assert _steps_done(watched) < episodes * DOCKER_STEPS or episodes == 1
        assert_invariants(monkeypatch, tmp_path, docker_engine, watched.process.pid)
    finally:
        for container in _owned_containers(docker_engine, watched.process.pid):
            container.remove(force=True)
