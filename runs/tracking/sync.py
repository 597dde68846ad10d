"""Upload what a store missed: the on-disk episodes of an evaluation, the files of a training.

When the store fails mid-way, an evaluation goes on untracked and a training goes on without
logging, every result kept in its local folder (``dlsched-runs/<id>/``, with ``tracking.json``
naming the store and run). :func:`sync_folder` (``dlsched runs sync <folder>``) uploads, once the
store is back:

- an evaluation: a child run for every episode folder that has no ``FINISHED`` run yet (an
  unfinished one, cut off by the failure, is ended ``FAILED`` and tagged as replaced), then the
  summary, and the parent run is ended ``FINISHED`` (``KILLED`` if the evaluation itself was
  interrupted);
- a training: the progress rows past the last one the run holds, the models and files, and the
  run's end.

Either way the run gets the tag ``dlsched.degraded=true``: its figures were uploaded after the
fact. Syncing is idempotent: what is in the store is never uploaded twice, so running it again
adds nothing; and two syncs of one folder at once take turns (a lock on the folder, which
leaves nothing in it), the second finding in the store what the first uploaded.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Run, ViewType

from dlsched.envs.errors import TrackingError
from dlsched.runs.evaluation.summaries import summarise
from dlsched.runs.tracking.episode_run import log_episode_run
from dlsched.runs.tracking.owners import end_run
from dlsched.runs.tracking.plots import TIMELINE_FILE
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.run_logging import TAG_DEGRADED, TAG_EVALUATION, TAG_KIND, log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, connect, first_line
from dlsched.runs.tracking.target import resolve_tracking_uri
from dlsched.runs.tracking.tracker import summary_metrics
from dlsched.runs.tracking.trajectory import (
    SCENARIO_FILE,
    EvaluationFolder,
    TrackingRecord,
    read_episode,
    read_tracking,
)

#: Set on an episode run that was ended because a synced run replaced it.
TAG_REPLACED_BY = "dlsched.replaced_by"
#: The training files and folders a training run holds as artifacts (see the harness).
TRAINING_ARTIFACT_DIRS: tuple[str, ...] = ("model", "final-model", "scenarios")
TRAINING_ARTIFACT_FILES: tuple[str, ...] = (
    "training_config.json",
    "validation.json",
    "progress.csv",
)
#: The progress column that counts timesteps: the step of every training metric.
TIMESTEPS_COLUMN = "time/total_timesteps"
#: Seconds a sync waits for another sync of the same folder to finish (two syncs of one folder
#: take turns, so that they never upload an episode twice: each reads what the store has, then
#: uploads the rest).
SYNC_LOCK_TIMEOUT_S = 600.0
#: Seconds between two tries of a waiting sync.
SYNC_LOCK_POLL_S = 0.1


@dataclass(frozen=True)
class SyncResult:
    """What one sync uploaded.

    Attributes:
        kind: ``evaluation`` or ``training``.
        run_id: the parent (evaluation) or training run.
        tracking_uri: the store.
        uploaded: the episodes (evaluation) or files (training) uploaded now.
        already: those the store already had.
        status: the run's status after the sync.
    """

    kind: str
    run_id: str
    tracking_uri: str
    uploaded: tuple[str, ...]
    already: tuple[str, ...]
    status: str


def sync_folder(folder: Path, waiting: Callable[[str], None] = print) -> SyncResult:
    """Upload what the store of ``folder``'s ``tracking.json`` misses; see the module docstring.

    ``MLFLOW_TRACKING_URI`` or the recorded store: the environment variable wins, as everywhere.

    Args:
        folder: the local folder of an evaluation or a training.
        waiting: told when another sync of ``folder`` is running, and this one waits for it.

    Raises:
        TrackingError: the folder is no tracked dlsched folder, the store is still down, or
            another sync of the folder held it too long.
    """
    record = read_tracking(folder)
    with _turn(folder, waiting):
        return _sync_locked(folder, record)


@contextlib.contextmanager
def _turn(folder: Path, waiting: Callable[[str], None]) -> Iterator[None]:
    """Hold the folder's sync lock: at once, or once another sync of it has ended.

    The lock is an ``flock`` on the folder itself: nothing is written in the folder for it (a
    lock file would be left behind, and could be removed safely only if every sync checked,
    once it held the file, that it was still the one in the folder), and the kernel releases it
    with a sync that dies.
    """
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        raise _unlockable(folder, error) from None
    try:
        if not _locked(folder, descriptor):
            waiting(
                f"{folder}: another `dlsched runs sync` of this folder is uploading; waiting for "
                f"it (at most {SYNC_LOCK_TIMEOUT_S:.0f} s), then uploading what it did not"
            )
            deadline = time.monotonic() + SYNC_LOCK_TIMEOUT_S
            while not _locked(folder, descriptor):
                if time.monotonic() > deadline:
                    raise TrackingError(
                        f"another `dlsched runs sync` of {folder} has held it for over "
                        f"{SYNC_LOCK_TIMEOUT_S:.0f} s; rerun once it ends (nothing is uploaded "
                        "twice)"
                    )
                time.sleep(SYNC_LOCK_POLL_S)
        yield
    finally:
        os.close(descriptor)  # and with it the lock


def _locked(folder: Path, descriptor: int) -> bool:
    """Take the lock of the folder open as ``descriptor`` if no other sync holds it."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:  # a file system without locks
        raise _unlockable(folder, error) from None
    return True


def _unlockable(folder: Path, error: OSError) -> TrackingError:
    return TrackingError(
        f"cannot lock {folder} for the sync ({error}): two syncs of one folder take turns, "
        "so that they never upload an episode twice; sync a copy of it on a local disk"
    )


def _sync_locked(folder: Path, record: TrackingRecord) -> SyncResult:
    target = resolve_tracking_uri(record.tracking_uri)
    client = connect(target)
    try:
        run = client.get_run(record.run_id)
    except STORE_ERRORS as error:
        raise TrackingError(
            f"run {record.run_id} of {folder} is not in {target.uri}: {first_line(error)}; "
            f"sync uploads to the store the folder was tracked in ({record.tracking_uri})"
        ) from error
    try:
        if record.kind == "evaluation":
            return _sync_evaluation(client, EvaluationFolder(folder), run, target.uri)
        return _sync_training(client, folder, run, target.uri)
    except STORE_ERRORS as error:
        raise TrackingError(
            f"the store {target.uri} failed again while syncing {folder}: {first_line(error)}; "
            "what was uploaded is complete, rerun `dlsched runs sync` when it answers"
        ) from error


def _sync_evaluation(
    client: MlflowClient, folder: EvaluationFolder, parent: Run, uri: str
) -> SyncResult:
    parent_id = parent.info.run_id
    experiment_id = parent.info.experiment_id
    evaluation_id = parent.data.tags[TAG_EVALUATION]
    children: dict[str, list[Run]] = {}
    query = f"tags.`{TAG_EVALUATION}` = '{evaluation_id}' and tags.`{TAG_KIND}` = 'episode'"
    token: str | None = None
    while True:  # every page: an episode missed here would be uploaded twice
        page = client.search_runs(
            [experiment_id], query, ViewType.ACTIVE_ONLY, 1000, page_token=token
        )
        for child in page:
            children.setdefault(child.info.run_name, []).append(child)
        token = page.token
        if not token:
            break
    uploaded, already = [], []
    version, commit = dlsched_version(), source_commit()
    # every episode read (and its files' sizes checked) before any is uploaded
    episode_dirs = folder.episode_dirs()
    results = [read_episode(episode_dir) for episode_dir in episode_dirs]
    for episode_dir, result in zip(episode_dirs, results, strict=True):
        name = episode_dir.name
        runs = children.get(name, [])
        if any(run.info.status == "FINISHED" for run in runs):
            already.append(name)
            continue
        run_id = log_episode_run(
            client,
            experiment_id,
            parent_id,
            evaluation_id,
            result,
            episode_dir,
            version,
            commit,
            extra_tags={TAG_DEGRADED: "true"},
        )
        for unfinished in runs:  # cut off by the failure: superseded, never deleted
            client.set_tag(unfinished.info.run_id, TAG_REPLACED_BY, run_id)
            if unfinished.info.status == "RUNNING":
                end_run(client, unfinished.info.run_id, "FAILED")
        uploaded.append(name)
    status = parent.info.status
    if status != "FINISHED":
        client.set_tag(parent_id, TAG_DEGRADED, "true")
        summary_files = [folder.path / "summary.json", folder.path / "summary.txt"]
        complete = all(path.is_file() for path in summary_files)
        if complete and results:
            kind = results[0].scenario.kind
            scores = [result.score for result in results]
            log_in_batches(client, parent_id, summary_metrics(summarise(scores, kind), kind))
            timeline = folder.path / TIMELINE_FILE  # drawn before the store was needed
            extra = [timeline] if timeline.is_file() else []
            for path in (*summary_files, folder.path / SCENARIO_FILE, *extra):
                client.log_artifact(parent_id, str(path))
        status = "FINISHED" if complete else "KILLED"
        end_run(client, parent_id, status)
    return SyncResult("evaluation", parent_id, uri, tuple(uploaded), tuple(already), status)


def _sync_training(client: MlflowClient, folder: Path, run: Run, uri: str) -> SyncResult:
    run_id = run.info.run_id
    uploaded, already = [], []
    history = client.get_metric_history(run_id, TIMESTEPS_COLUMN)
    logged_through = max((metric.step for metric in history), default=-1)
    rows = _progress_rows(folder / "progress.csv", logged_through)
    if rows:
        log_in_batches(client, run_id, rows)
        uploaded.append(f"progress.csv ({len({m.step for m in rows})} rows)")
    present = {info.path for info in client.list_artifacts(run_id)}
    for name in (*TRAINING_ARTIFACT_DIRS, *TRAINING_ARTIFACT_FILES):
        path = folder / name
        if not path.exists():
            continue
        if name in present:
            already.append(name)
            continue
        if name == "model":  # as the harness logs it: an MLflow Model around the folder
            # imported here: it loads SB3 and torch, which syncing an evaluation does not need
            from dlsched.policies.mlflow_model import save_mlflow_model

            path = save_mlflow_model(path, folder / "mlflow-model")
        if path.is_dir():
            client.log_artifacts(run_id, str(path), name)
        else:
            client.log_artifact(run_id, str(path))
        uploaded.append(name)
    status = run.info.status
    if status == "RUNNING":
        status = "FINISHED" if (folder / "final-model").is_dir() else "KILLED"
    if uploaded or run.info.status == "RUNNING":
        client.set_tag(run_id, TAG_DEGRADED, "true")
        end_run(client, run_id, status)
    return SyncResult("training", run_id, uri, tuple(uploaded), tuple(already), status)


def _progress_rows(path: Path, after_step: int) -> list[Metric]:
    """The metrics of the progress rows past ``after_step`` timesteps."""
    if not path.is_file():
        return []
    metrics = []
    now_ms = int(time.time() * 1000)
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            try:
                step = int(float(row.get(TIMESTEPS_COLUMN) or "nan"))
            except ValueError:
                continue
            if step <= after_step:
                continue
            for key, text in row.items():
                try:
                    value = float(text)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(value):
                    metrics.append(Metric(key, value, now_ms, step))
    return metrics


def describe(result: SyncResult) -> str:
    """One paragraph saying what a sync did."""
    what = "episodes" if result.kind == "evaluation" else "files"
    uploaded = ", ".join(result.uploaded) or "nothing"
    return (
        f"{result.kind} run {result.run_id} in {result.tracking_uri}: uploaded {uploaded}; "
        f"{len(result.already)} {what} were already there; status {result.status}"
    ) + ("" if not result.uploaded else "; tagged dlsched.degraded=true")
