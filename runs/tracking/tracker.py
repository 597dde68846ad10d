"""The MLflow runs of an evaluation: a parent run per evaluation, a child run per episode.

Layout in the store (docs/tracking.md, "Runs and tracking"):

- one **experiment per scenario**, named after it (``--experiment`` names another);
- one **parent run per evaluation**, named by its evaluation id (scenario, UTC time, random
  suffix), so no evaluation ever reuses or overwrites another's run;
- one **child run per episode** (tag ``mlflow.parentRunId``), named ``<policy>-seed<seed>``, with
  params (policy and every parameter, scenario name, content hash and kind, backend, seed,
  dlsched version, git commit when the code runs from a checkout), per-step metrics (step =
  environment step), per-episode metrics ``episode/<metric>``, and artifacts (the trajectory
  table, the scenario file, the episode record, and its plots when asked for) logged from the
  local episode folder of :mod:`dlsched.runs.tracking.trajectory`, which is written first.

The episode runs are logged by an :class:`~dlsched.runs.tracking.episode_writer.EpisodeWriter`
beside the episodes, so that the evaluation does not wait for the store between them; the
parent run waits for it before its summary.

Metrics and params go through :meth:`MlflowClient.log_batch` within MLflow's limits (1000
metrics, 100 params or tags, 1000 entities a call); one call per point costs about 5 ms.

Nothing is lost when the store fails: every run carries its owner process
(:mod:`~dlsched.runs.tracking.owners`) and is ended in a ``finally`` (``KILLED`` on a signal,
``FAILED`` on an error); a store that stops answering mid-way is said at once (a tracking
server is watched by :class:`~dlsched.runs.tracking.server_watch.ServerWatch`), the evaluation
goes on untracked with every episode on disk, and ``dlsched runs sync <folder>``
(:mod:`~dlsched.runs.tracking.sync`) uploads them when the store is back.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from urllib.parse import urlparse

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID

from dlsched.envs.errors import TrackingError
from dlsched.envs.scenarios.file_format import dump_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC, EpisodeMetrics
from dlsched.runs.evaluation.records import EpisodeResult, PolicyIdentity, StepRecord
from dlsched.runs.evaluation.summaries import PolicySummary
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.episode_writer import (
    EpisodeHandled,
    EpisodeJob,
    EpisodeLogged,
    EpisodeRunContext,
    EpisodeWriter,
    Reply,
)
from dlsched.runs.tracking.owners import TAG_ENDED_BY, end_run, owner_tags
from dlsched.runs.tracking.plots import TIMELINE_FILE, plot_timeline, timeline_values
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.server_watch import ServerWatch
from dlsched.runs.tracking.store import STORE_ERRORS, experiment_id, first_line
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import EvaluationFolder, TrackingRecord, episode_name

#: MLflow's batch limits (mlflow.utils.validation).
MAX_METRICS_PER_CALL = 1000
MAX_PARAMS_PER_CALL = 100
MAX_ENTITIES_PER_CALL = 1000

TAG_KIND = "dlsched.kind"  # "evaluation" on parent runs, "episode" on child runs
TAG_EVALUATION = "dlsched.evaluation"
TAG_POLICY_PARAMS = "dlsched.policy_params"  # the parameters as typed JSON
TAG_DEGRADED = "dlsched.degraded"  # "true" on a run whose tracking failed and was synced later
TAG_INCIDENTS = "dlsched.incidents"  # what the backend reported that makes the figures doubtful
#: MLflow's limit on a tag's value is 8000 characters.
MAX_TAG_CHARS = 8000
EPISODE_METRIC_PREFIX = "episode/"
#: The MLflow names of the headline metrics (:data:`~dlsched.runs.evaluation.PRIMARY_METRIC`)
#: of the episode runs, and the prefix of the parent's and the comparison's: capitalised and
#: spelt out, because MLflow's run table orders metric columns by code point, capitals before
#: lower case, and every other metric is lower case: so the headline is the first column. Episode
#: runs logged by earlier versions hold it as ``episode/<name>``; ``compare`` reads both.
HEADLINE_KEYS: Mapping[str, str] = {
    PRIMARY_METRIC[JobKind.INFERENCE]: "Satisfied fraction",
    PRIMARY_METRIC[JobKind.TRAINING]: "Mean completion s",
}
BACKEND_PARAM_PREFIX = "backend."  # one param per backend option: backend.workload_threading


def new_evaluation_id(scenario: Scenario) -> str:
    """A unique evaluation id: ``<scenario>-<UTC date-time>-<random hex>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{scenario.name}-{stamp}-{secrets.token_hex(3)}"


# ---------------------------------------------------------------------------------- writing


def backend_params(options: Mapping[str, str]) -> dict[str, str]:
    """The params of a backend's options: ``backend.<option>``, read back by :func:`_stored`."""
    return {BACKEND_PARAM_PREFIX + key: str(value) for key, value in options.items()}


def episode_params(
    result: EpisodeResult, evaluation_id: str, version: str, commit: str | None
) -> dict[str, str]:
    """The params of an episode's run."""
    params = {
        "policy": result.policy.name,
        **{f"policy.{key}": str(value) for key, value in result.policy.params},
        "scenario": result.scenario.name,
        "scenario.hash": result.scenario.content_hash(),
        "scenario.kind": result.scenario.kind.value,
        "backend": result.backend,
        **backend_params(result.backend_options),
        "seed": str(result.seed),
        "evaluation": evaluation_id,
        "dlsched.version": version,
    }
    if commit is not None:
        params["git.commit"] = commit
    return params


def step_metrics(kind: JobKind, step: StepRecord) -> dict[str, float]:
    """The per-step metrics of one step, by MLflow metric name (MLflow's step is the step).

    Each point costs the store about 100 us of this process's time, more than a replay step,
    so one series is a metric: the headline over time (satisfied services, or jobs finished),
    which MLflow's chart view draws for the runs side by side. Everything else of every step
    (time, active jobs, the limits' total, reward, the sizes of DQoES's sets G and B, ``Q_G``,
    ``Q_B``) is in the episode's ``episode.json`` artifact, and each container's in
    ``trajectory.csv``.
    """
    if kind is JobKind.INFERENCE:
        return {"satisfied": float(step.satisfied)}
    return {"finished_jobs": float(step.finished_jobs)}


def episode_metric_key(name: str) -> str:
    """The MLflow name of an :class:`EpisodeMetrics` field: its headline name for the headline
    (:data:`HEADLINE_KEYS`), ``episode/<name>`` for the others."""
    return HEADLINE_KEYS.get(name, EPISODE_METRIC_PREFIX + name)


def episode_metrics_by_name(metrics: EpisodeMetrics) -> dict[str, float]:
    """The per-episode metrics that have a value, by MLflow metric name."""
    return {episode_metric_key(name): value for name, value in metrics.defined().items()}


def log_in_batches(
    client: MlflowClient,
    run_id: str,
    metrics: Sequence[Metric] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> None:
    """Log metrics, params and tags in as few ``log_batch`` calls as MLflow's limits allow.

    Each call is a transaction of the store (a few milliseconds on sqlite whatever it holds), so
    params, tags and metrics share calls: an episode's run is one call.
    """
    param_list = [Param(key, value) for key, value in (params or {}).items()]
    tag_list = [RunTag(key, value) for key, value in (tags or {}).items()]
    metric_list = list(metrics)
    while param_list or tag_list or metric_list:
        params_chunk, param_list = (
            param_list[:MAX_PARAMS_PER_CALL],
            param_list[MAX_PARAMS_PER_CALL:],
        )
        tags_chunk, tag_list = tag_list[:MAX_PARAMS_PER_CALL], tag_list[MAX_PARAMS_PER_CALL:]
        room = min(
            MAX_METRICS_PER_CALL, MAX_ENTITIES_PER_CALL - len(params_chunk) - len(tags_chunk)
        )
        metrics_chunk, metric_list = metric_list[:room], metric_list[room:]
        client.log_batch(
            run_id,
            metrics=metrics_chunk,
            params=params_chunk,
            tags=tags_chunk,
            synchronous=True,
        )


class EvaluationTracker:
    """Records one evaluation: each episode to its local folder first, then to MLflow.

    Use it as a context manager around the episodes: entering creates the local folder, the
    experiment and the parent run, so a refusing store is reported before any episode runs (and
    the empty folder is removed); leaving on an exception marks the parent run failed.

    Each episode is written to the local folder at once, then handed to an
    :class:`~dlsched.runs.tracking.episode_writer.EpisodeWriter`, which logs it while the next
    one runs; :meth:`wait_for_episodes` waits for it (and draws the timeline meanwhile).

    If the store fails after that, or the writer stops answering (it is then stopped, and the
    runs it left ``RUNNING`` are ended ``KILLED``), the evaluation goes on without it:
    :attr:`failure` holds the error, ``warn`` has said where the local records are, and every
    later episode is still written to the local folder.

    Args:
        client: a client from :func:`connect`.
        target: where it tracks.
        scenario: the scenario evaluated.
        folder: the evaluation's local folder.
        evaluation_id: the evaluation's unique id (the parent run's name).
        backend: the backend's name.
        policies: the policies evaluated.
        seeds: the seeds of every policy's episodes.
        experiment: the experiment's name; the scenario's name by default.
        warn: where warnings go (stderr in the CLI).
        plots: draw the evaluation's timeline on the parent run.
        episode_plots: also draw every episode's plots (latency or completion, limits) on its
            run; they take the writer far longer than logging the episode.
        backend_options: the keyword arguments the backend is built with.
    """

    def __init__(
        self,
        client: MlflowClient,
        target: TrackingTarget,
        scenario: Scenario,
        folder: EvaluationFolder,
        evaluation_id: str,
        backend: str,
        policies: Sequence[PolicyIdentity],
        seeds: Sequence[int],
        experiment: str | None = None,
        warn: Callable[[str], None] = print,
        plots: bool = True,
        backend_options: Mapping[str, str] | None = None,
        episode_plots: bool = False,
    ) -> None:
        self.client = client
        self.target = target
        self.scenario = scenario
        self.folder = folder
        self.evaluation_id = evaluation_id
        self.backend = backend
        self.backend_options = dict(backend_options or {})
        self.policies = tuple(policies)
        self.seeds = tuple(seeds)
        self.experiment_name = experiment or scenario.name
        self.warn = warn
        self.plots = plots
        self.episode_plots = episode_plots
        self.version = dlsched_version()
        self.commit = source_commit()
        self.scenario_yaml = dump_scenario(scenario)
        self.scenario_file: Path | None = None
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self.episode_run_ids: dict[str, str] = {}
        self.failure: TrackingError | None = None
        self._writer: EpisodeWriter | None = None
        # per policy, each episode's headline over time, for the parent run's timeline plot
        self._timelines: dict[str, list[tuple[list[float], list[float]]]] = {}
        self._watch: ServerWatch | None = None

    # -------------------------------------------------------------- life cycle

    def __enter__(self) -> EvaluationTracker:
        self.folder.create()
        try:
            self._start_runs()
        except BaseException:
            shutil.rmtree(self.folder.path, ignore_errors=True)  # nothing ran: leave nothing
            raise
        self.scenario_file = self.folder.write_scenario(self.scenario_yaml)
        assert self.experiment_id is not None and self.parent_run_id is not None
        self.folder.write_tracking(
            TrackingRecord(
                kind="evaluation",
                tracking_uri=self.target.uri,
                experiment_id=self.experiment_id,
                run_id=self.parent_run_id,
                name=self.evaluation_id,
            )
        )
        if urlparse(self.target.uri).scheme in ("http", "https"):
            self._watch = ServerWatch(self.target.uri, self.warn).start()
        self._writer = self._start_writer()
        return self

    def _start_writer(self) -> EpisodeWriter:
        assert self.experiment_id is not None and self.parent_run_id is not None
        try:
            return EpisodeWriter.start(
                self.client,
                EpisodeRunContext(
                    tracking_uri=self.target.uri,
                    experiment_id=self.experiment_id,
                    parent_run_id=self.parent_run_id,
                    evaluation_id=self.evaluation_id,
                    version=self.version,
                    commit=self.commit,
                    owner_tags=owner_tags(),
                ),
            )
        except BaseException:  # no episode can be logged: the parent run ends here
            with contextlib.suppress(*STORE_ERRORS):
                end_run(self.client, self.parent_run_id, "FAILED", sys.stderr)
            raise

    def _start_runs(self) -> None:
        try:
            self.experiment_id = self._experiment()
            tags = {TAG_KIND: "evaluation", TAG_EVALUATION: self.evaluation_id, **owner_tags()}
            if self.commit is not None:
                tags[MLFLOW_GIT_COMMIT] = self.commit
            with deferred():  # a run created, its id not yet kept, could never be ended
                run = self.client.create_run(
                    self.experiment_id, run_name=self.evaluation_id, tags=tags
                )
                self.parent_run_id = run.info.run_id
            log_in_batches(self.client, self.parent_run_id, params=self._evaluation_params())
        except STORE_ERRORS as error:
            raise TrackingError(
                f"MLflow tracking store {self.target.uri} refused to start the evaluation: "
                f"{first_line(error)}. {self.target.fix_hint()}"
            ) from error

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # stopped or failed: what was handed over is logged (without plots) before the parent
        # run is ended, so no episode run is left RUNNING
        self._close_writer(hurry=kind is not None)
        if self._watch is not None:
            self._watch.stop()
        if kind is None or self.failure is not None or self.parent_run_id is None:
            return  # ended by finish(), or left to `dlsched runs sync` (and repair) if it failed
        status = "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        with contextlib.suppress(*STORE_ERRORS):  # the original exception is what matters
            end_run(self.client, self.parent_run_id, status, sys.stderr)

    def _experiment(self) -> str:
        return experiment_id(
            self.client,
            self.experiment_name,
            self.target,
            {"dlsched.scenario": self.experiment_name},
        )

    def _evaluation_params(self) -> dict[str, str]:
        params = {
            "scenario": self.scenario.name,
            "scenario.hash": self.scenario.content_hash(),
            "scenario.kind": self.scenario.kind.value,
            "backend": self.backend,
            **backend_params(self.backend_options),
            "policies": ",".join(policy.name for policy in self.policies),
            "episodes": str(len(self.seeds)),
            "seeds": ",".join(str(seed) for seed in self.seeds),
            "dlsched.version": self.version,
            "local_folder": str(self.folder.path.resolve()),
        }
        for policy in self.policies:
            params.update({f"{policy.name}.{k}": str(v) for k, v in policy.params})
        if self.commit is not None:
            params["git.commit"] = self.commit
        return params

    # -------------------------------------------------------------- episodes

    def record_episode(self, result: EpisodeResult) -> None:
        """Write the episode to its local folder, then hand it to the writer to log.

        A stop signal waits until both are done, so that every episode on disk is logged.
        """
        with deferred():
            self._record_episode(result)

    def _record_episode(self, result: EpisodeResult) -> None:
        episode_dir = self.folder.write_episode(result, self.scenario_yaml)
        self._timelines.setdefault(result.policy.name, []).append(timeline_values(result))
        for incident in result.incidents:
            self.warn(
                f"warning: episode {episode_name(result.policy, result.seed)}: {incident}; its "
                f"figures are doubtful, and its run is tagged {TAG_INCIDENTS}"
            )
        assert self._writer is not None, "record_episode outside the tracker's `with` block"
        self._take(self._writer.replies())
        if self.failure is None and self._watch is not None and self._watch.down:
            name = episode_name(result.policy, result.seed)
            self._fail(f"the server stopped answering before episode {name} was logged")
        if self.failure is None or self.episode_plots:
            job = EpisodeJob(result, episode_dir, self.episode_plots, log=self.failure is None)
            self._take(self._writer.submit(job))

    def wait_for_episodes(self) -> None:
        """Wait until the writer has logged every episode handed to it (the timeline is drawn
        meanwhile); :attr:`episode_run_ids` is then complete. Once: later calls return at once."""
        if self._writer is None or self._writer.closed:
            return
        if self.plots and self._timelines:
            plot_timeline(
                self.scenario.kind,
                self._timelines,
                f"{self.scenario.name} ({self.backend})",
                self.folder.path / TIMELINE_FILE,
            )
        self._close_writer(hurry=False)

    def _close_writer(self, hurry: bool) -> None:
        if self._writer is not None:
            self._take(self._writer.close(hurry))

    def _take(self, replies: Sequence[Reply]) -> None:
        for reply in replies:
            if isinstance(reply, EpisodeLogged):
                self.episode_run_ids[reply.name] = reply.run_id
                continue
            if isinstance(reply, EpisodeHandled):  # drawn only, the store having failed
                continue
            what = reply.what
            if reply.stopped:
                what += self._end_stopped_writers_runs()
            if self.failure is None:
                self._fail(what)

    def _end_stopped_writers_runs(self) -> str:
        """Mark ``KILLED`` the episode runs a stopped writer left ``RUNNING``; a clause saying
        how many (or why none could be)."""
        query = (
            f"tags.`{TAG_EVALUATION}` = '{self.evaluation_id}' and tags.`{TAG_KIND}` = 'episode'"
            " and attributes.status = 'RUNNING'"
        )
        try:
            left = self.client.search_runs([str(self.experiment_id)], query, max_results=1000)
            for run in left:
                self.client.set_tag(run.info.run_id, TAG_ENDED_BY, "its episode writer was stopped")
                end_run(self.client, run.info.run_id, "KILLED")
        except STORE_ERRORS as error:
            return f"; its unfinished runs could not be marked KILLED: {first_line(error)}"
        names = ", ".join(run.info.run_name for run in left)
        return (
            f"; {len(left)} episode run(s) it left RUNNING marked KILLED ({names})" if left else ""
        )

    def _fail(self, what: str) -> None:
        """Go on untracked from now on, and say where the episodes are and how to upload them."""
        folder = self.folder.path.resolve()
        self.failure = TrackingError(
            f"tracking to {self.target.uri} failed: {what}. Every finished episode is on disk "
            f"in {folder} (trajectory.csv, episode.json and scenario.yaml per episode); "
            "the evaluation goes on without tracking. When the store is back, upload them: "
            f"dlsched runs sync {folder}"
        )
        self.warn(f"warning: {self.failure}")

    def finish(self, summaries: Sequence[PolicySummary], files: Sequence[Path]) -> None:
        """Log the summary on the parent run, with ``files`` as artifacts, and close it."""
        self.wait_for_episodes()  # if the caller has not
        if self.failure is not None or self.parent_run_id is None or self.scenario_file is None:
            return  # the store failed, or the evaluation never started
        if self._watch is not None and self._watch.down:
            self._fail("the server stopped answering before the summary was logged")
            return
        metrics = summary_metrics(summaries, self.scenario.kind)
        timeline = self.folder.path / TIMELINE_FILE
        if timeline.is_file():
            files = (*files, timeline)
        try:
            log_in_batches(self.client, self.parent_run_id, metrics)
            for path in (*files, self.scenario_file):
                self.client.log_artifact(self.parent_run_id, str(path))
            end_run(self.client, self.parent_run_id, "FINISHED", sys.stderr)
        except STORE_ERRORS as error:
            self._fail(f"logging the evaluation summary failed: {first_line(error)}")


def summary_metrics(summaries: Sequence[PolicySummary], kind: JobKind) -> list[Metric]:
    """The parent run's metrics: ``<headline>/<policy>`` (:data:`HEADLINE_KEYS`), each policy's
    mean.

    Only the headline (:data:`~dlsched.runs.evaluation.PRIMARY_METRIC`) is a metric, so the
    run table shows it as a column per policy and MLflow's chart view draws a few charts, not
    one single-bar chart per policy, metric and interval end; every metric with its confidence
    interval is in the ``summary.json`` and ``summary.txt`` artifacts beside it.
    """
    now_ms = int(time.time() * 1000)
    primary = PRIMARY_METRIC[kind]
    return [
        Metric(f"{HEADLINE_KEYS[primary]}/{summary.label}", mean, now_ms, 0)
        for summary in summaries
        if (mean := summary.metric(primary).estimate.mean) is not None
    ]


def log_episode_run(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    evaluation_id: str,
    result: EpisodeResult,
    episode_dir: Path,
    version: str,
    commit: str | None,
    extra_tags: Mapping[str, str] | None = None,
) -> str:
    """Log one episode as a child run of ``parent_run_id``; its run id.

    The run is ended whatever happens: ``FINISHED`` once everything is logged, ``KILLED`` if a
    signal cuts the logging short, ``FAILED`` if the store refuses part of it.
    """
    tags = {
        MLFLOW_PARENT_RUN_ID: parent_run_id,
        TAG_KIND: "episode",
        TAG_EVALUATION: evaluation_id,
        TAG_POLICY_PARAMS: json.dumps(dict(result.policy.params)),
        **owner_tags(),
        **(extra_tags or {}),
    }
    if result.incidents:
        tags[TAG_INCIDENTS] = "\n".join(result.incidents)[:MAX_TAG_CHARS]
    if commit is not None:
        tags[MLFLOW_GIT_COMMIT] = commit
    name = episode_name(result.policy, result.seed)
    # A signal waits until the episode's run is logged and ended: cut in the middle of MLflow's
    # writes, it left the run RUNNING (its id never returned) or a transaction half-done.
    with deferred():
        return _log_episode(
            client, experiment_id, name, tags, result, episode_dir, evaluation_id, version, commit
        )


def _log_episode(
    client: MlflowClient,
    experiment_id: str,
    name: str,
    tags: Mapping[str, str],
    result: EpisodeResult,
    episode_dir: Path,
    evaluation_id: str,
    version: str,
    commit: str | None,
) -> str:
    run = client.create_run(experiment_id, run_name=name, tags=dict(tags))
    run_id: str = run.info.run_id
    status = "FAILED"
    try:
        now_ms = int(time.time() * 1000)
        metrics = [
            Metric(key, value, now_ms, step.step)
            for step in result.steps
            for key, value in step_metrics(result.scenario.kind, step).items()
        ]
        metrics += [
            Metric(key, value, now_ms, 0)
            for key, value in episode_metrics_by_name(result.metrics).items()
        ]
        params = episode_params(result, evaluation_id, version, commit)
        log_in_batches(client, run_id, metrics, params)
        # the repository of the run just created: client.log_artifacts(run_id) reads the run
        # back to find it (8 ms, a sixth of the episode's logging on sqlite)
        artifacts = get_artifact_repository(run.info.artifact_uri, tracking_uri=client.tracking_uri)
        artifacts.log_artifacts(str(episode_dir))
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        # a store that refused the logging may refuse this too; the owner tags let a later
        # command end the run then
        with contextlib.suppress(*STORE_ERRORS):
            end_run(client, run_id, status)
    return run_id
