"""MLflow tracking of evaluations: where to track, the check before anything runs, the runs.

Layout in the store (DESIGN.md, "Runs and tracking"):

- one **experiment per scenario**, named after it (``--experiment`` names another);
- one **parent run per evaluation**, named by its evaluation id (scenario, UTC time, random
  suffix), so no evaluation ever reuses or overwrites another's run;
- one **child run per episode** (tag ``mlflow.parentRunId``), named ``<policy>-seed<seed>``, with
  params (policy and every parameter, scenario name, content hash and kind, backend, seed,
  dlsched version, git commit when the code runs from a checkout), per-step metrics (step =
  environment step), per-episode metrics ``episode/<metric>``, and artifacts (the trajectory
  table, the scenario file, the episode record and plots) logged from the local episode folder
  of :mod:`dlsched.runs.trajectory`, which is written first.

Metrics and params go through :meth:`MlflowClient.log_batch` within MLflow's limits (1000
metrics, 100 params or tags, 1000 entities a call); one call per point costs about 5 ms.

Where to track: ``MLFLOW_TRACKING_URI`` if set, else ``--tracking-uri``, else
``sqlite:///mlflow.db`` in the working directory (MLflow's own default, so ``mlflow ui`` run in
the same folder shows the runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import TextIO, TypeVar
from urllib.parse import urlparse

import requests
from mlflow import MlflowClient
from mlflow.entities import Experiment, Metric, Param, Run, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID

from dlsched.envs.errors import TrackingError
from dlsched.envs.scenario import JobKind, Scenario
from dlsched.envs.scenario_file import dump_scenario
from dlsched.runs.evaluation import (
    DEFAULT_POLICY,
    EpisodeMetrics,
    EpisodeResult,
    EpisodeScore,
    PolicyIdentity,
    PolicySummary,
    StepRecord,
    backend_label,
)
from dlsched.runs.plots import plot_episode
from dlsched.runs.trajectory import EvaluationFolder, episode_name

ENV_VAR = "MLFLOW_TRACKING_URI"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
#: Seconds the up-front check waits for an HTTP tracking server's health endpoint.
PROBE_TIMEOUT_S = 5.0

#: MLflow's batch limits (mlflow.utils.validation).
MAX_METRICS_PER_CALL = 1000
MAX_PARAMS_PER_CALL = 100

TAG_KIND = "dlsched.kind"  # "evaluation" on parent runs, "episode" on child runs
TAG_EVALUATION = "dlsched.evaluation"
TAG_POLICY_PARAMS = "dlsched.policy_params"  # the parameters as typed JSON
EPISODE_METRIC_PREFIX = "episode/"
BACKEND_PARAM_PREFIX = "backend."  # one param per backend option: backend.workload_threading

#: Errors a tracking store raises when it is unreachable or refuses a write.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    MlflowException,
    requests.RequestException,
    OSError,
)


# ---------------------------------------------------------------------------------- where


@dataclass(frozen=True)
class TrackingTarget:
    """The tracking URI in use and where it came from.

    Attributes:
        uri: the tracking URI.
        source: ``MLFLOW_TRACKING_URI``, ``--tracking-uri`` or ``default``.
        ignored: the ``--tracking-uri`` value that ``MLFLOW_TRACKING_URI`` overrode, if it
            differed.
    """

    uri: str
    source: str
    ignored: str | None = None

    def describe(self) -> str:
        """One line saying which store is used, and a warning if a typed flag was overridden."""
        line = f"tracking: {self.uri} (from {self.source})"
        if self.ignored is not None:
            line += (
                f"\nwarning: --tracking-uri {self.ignored} is ignored because {ENV_VAR} is set "
                f"to {self.uri}; unset {ENV_VAR} to use the flag"
            )
        return line


def resolve_tracking_uri(
    flag: str | None, environ: Mapping[str, str] | None = None
) -> TrackingTarget:
    """Pick the tracking URI: the environment variable, else the flag, else the default.

    Args:
        flag: the ``--tracking-uri`` value, ``None`` if not given.
        environ: the environment to read (``os.environ`` by default).
    """
    from_env = (os.environ if environ is None else environ).get(ENV_VAR) or None
    if from_env is not None:
        ignored = flag if flag is not None and flag != from_env else None
        return TrackingTarget(from_env, ENV_VAR, ignored)
    if flag is not None:
        return TrackingTarget(flag, "--tracking-uri")
    return TrackingTarget(DEFAULT_TRACKING_URI, "default")


def connect(target: TrackingTarget) -> MlflowClient:
    """A client of ``target``'s store, after checking that the store answers.

    Raises:
        TrackingError: naming the URI, what went wrong and the fix, before anything has run.
    """
    scheme = urlparse(target.uri).scheme
    if scheme in ("http", "https"):
        _probe_http(target)
    elif scheme == "sqlite":
        _check_sqlite_folder(target)
    try:
        client = MlflowClient(tracking_uri=target.uri)
        client.search_experiments(max_results=1)
    # any failure here means the store cannot be used; it is reported with its cause
    except Exception as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} (from {target.source}) cannot be used: "
            f"{type(error).__name__}: {_first_line(error)}. {_fix(target)}"
        ) from error
    return client


def _probe_http(target: TrackingTarget) -> None:
    # MLflow's own client retries a dead server with backoff for minutes; this answers at once
    url = target.uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        pass  # something answers; the API call that follows tells whether it is MLflow
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise TrackingError(
            f"MLflow tracking server {target.uri} (from {target.source}) is unreachable: "
            f"{reason}. {_fix(target)}"
        ) from None


def _check_sqlite_folder(target: TrackingTarget) -> None:
    folder = Path(urlparse(target.uri).path[1:]).parent  # sqlite:///rel.db, sqlite:////abs.db
    if not folder.is_dir():
        raise TrackingError(
            f"MLflow tracking store {target.uri} (from {target.source}) is in folder "
            f"{folder.resolve()}, which does not exist. Create it, or {_fix(target, lower=True)}"
        )


def _fix(target: TrackingTarget, lower: bool = False) -> str:
    if target.source == ENV_VAR:
        fix = f"Fix or unset {ENV_VAR}"
    elif target.source == "--tracking-uri":
        fix = "Fix --tracking-uri"
    else:
        fix = f"Set {ENV_VAR} or --tracking-uri to a usable store"
    parsed = urlparse(target.uri)
    if parsed.scheme in ("http", "https"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        fix += f" (or start the server: mlflow server --host {parsed.hostname} --port {port})"
    fix += ", or run without tracking: --no-tracking."
    return fix[0].lower() + fix[1:] if lower else fix


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else repr(error)


# ---------------------------------------------------------------------------------- provenance


def dlsched_version() -> str:
    """The installed distribution's version."""
    return metadata.version("dlsched")


def source_commit() -> str | None:
    """The git commit of the dlsched code that runs, if it runs from a git checkout.

    The checkout is the folder holding the source of :mod:`dlsched.runs` (an editable install);
    an installed copy has none, and then nothing is recorded. A checkout with uncommitted
    changes gets ``-dirty`` appended, since the commit alone would not say what ran.
    """
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != root:
            return None
        commit = _git(root, "rev-parse", "HEAD")
        if commit is None:
            return None
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except OSError:  # no git executable
        return None
    return f"{commit}-dirty" if dirty else commit


def _git(root: Path, *args: str) -> str | None:
    completed = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False
    )
    return completed.stdout.strip() if completed.returncode == 0 else None


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
    """The per-step metrics of one step, by MLflow metric name."""
    values: dict[str, float] = {
        "time_s": step.time_s,
        "active_jobs": float(step.active_jobs),
        "total_limit": step.total_limit,
    }
    if step.reward is not None:
        values["reward"] = step.reward
    if kind is JobKind.INFERENCE:
        values.update(
            satisfied=float(step.satisfied),
            G=float(step.g),
            B=float(step.b),
            Q_G=step.q_g,
            Q_B=step.q_b,
        )
        if step.satisfied_fraction is not None:
            values["satisfied_fraction"] = step.satisfied_fraction
    else:
        values["finished_jobs"] = float(step.finished_jobs)
    return values


def episode_metrics_by_name(metrics: EpisodeMetrics) -> dict[str, float]:
    """The per-episode metrics that have a value, by MLflow metric name."""
    return {EPISODE_METRIC_PREFIX + name: value for name, value in metrics.defined().items()}


_T = TypeVar("_T")


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def log_in_batches(
    client: MlflowClient,
    run_id: str,
    metrics: Sequence[Metric] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> None:
    """Log metrics, params and tags with as few ``log_batch`` calls as MLflow's limits allow."""
    param_list = [Param(key, value) for key, value in (params or {}).items()]
    tag_list = [RunTag(key, value) for key, value in (tags or {}).items()]
    for params_chunk in _chunks(param_list, MAX_PARAMS_PER_CALL):
        client.log_batch(run_id, params=params_chunk, synchronous=True)
    for tags_chunk in _chunks(tag_list, MAX_PARAMS_PER_CALL):
        client.log_batch(run_id, tags=tags_chunk, synchronous=True)
    for metrics_chunk in _chunks(metrics, MAX_METRICS_PER_CALL):
        client.log_batch(run_id, metrics=metrics_chunk, synchronous=True)


class EvaluationTracker:
    """Records one evaluation: each episode to its local folder first, then to MLflow.

    Use it as a context manager around the episodes: entering creates the local folder, the
    experiment and the parent run, so a refusing store is reported before any episode runs (and
    the empty folder is removed); leaving on an exception marks the parent run failed.

    If the store fails after that, the evaluation goes on without it: :attr:`failure` holds the
    error, ``warn`` has said where the local records are, and every later episode is still
    written to the local folder.

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
        plots: draw the episode plots (they cost more than the rest of the tracking).
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
        self.version = dlsched_version()
        self.commit = source_commit()
        self.scenario_yaml = dump_scenario(scenario)
        self.scenario_file: Path | None = None
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self.episode_run_ids: dict[str, str] = {}
        self.failure: TrackingError | None = None
        self._defaults: dict[int, EpisodeResult] = {}

    # -------------------------------------------------------------- life cycle

    def __enter__(self) -> EvaluationTracker:
        self.folder.create()
        try:
            self._start_runs()
        except BaseException:
            shutil.rmtree(self.folder.path, ignore_errors=True)  # nothing ran: leave nothing
            raise
        self.scenario_file = self.folder.write_scenario(self.scenario_yaml)
        return self

    def _start_runs(self) -> None:
        try:
            self.experiment_id = self._experiment()
            tags = {TAG_KIND: "evaluation", TAG_EVALUATION: self.evaluation_id}
            if self.commit is not None:
                tags[MLFLOW_GIT_COMMIT] = self.commit
            run = self.client.create_run(self.experiment_id, run_name=self.evaluation_id, tags=tags)
            self.parent_run_id = run.info.run_id
            log_in_batches(self.client, self.parent_run_id, params=self._evaluation_params())
        except STORE_ERRORS as error:
            raise TrackingError(
                f"MLflow tracking store {self.target.uri} refused to start the evaluation: "
                f"{_first_line(error)}. {_fix(self.target)}"
            ) from error

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None or self.failure is not None or self.parent_run_id is None:
            return
        status = "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        with contextlib.suppress(*STORE_ERRORS):  # the original exception is what matters
            _set_terminated(self.client, self.parent_run_id, status, sys.stderr)

    def _experiment(self) -> str:
        name = self.experiment_name
        existing = self.client.get_experiment_by_name(name)
        if existing is None:
            try:
                return self.client.create_experiment(name, tags={"dlsched.scenario": name})
            except MlflowException:
                existing = self.client.get_experiment_by_name(name)  # created concurrently
                if existing is None:
                    raise
        if existing.lifecycle_stage == "deleted":
            raise TrackingError(
                f"MLflow experiment {name!r} (id {existing.experiment_id}) in {self.target.uri} "
                f"is deleted; restore it (mlflow experiments restore --experiment-id "
                f"{existing.experiment_id}) or pass --experiment with another name"
            )
        return str(existing.experiment_id)

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
        """Write the episode to its local folder, then log it as a child run."""
        episode_dir = self.folder.write_episode(result, self.scenario_yaml)
        if self.plots:
            if result.policy.name == DEFAULT_POLICY:
                self._defaults[result.seed] = result
                reference = None
            else:
                reference = self._defaults.get(result.seed)
            plot_episode(result, reference, episode_dir)
        if self.failure is not None:
            return
        try:
            self._log_episode(result, episode_dir)
        except STORE_ERRORS as error:
            self.failure = TrackingError(
                f"tracking to {self.target.uri} failed while logging episode "
                f"{episode_name(result.policy, result.seed)}: {_first_line(error)}. Every "
                f"finished episode is on disk in {self.folder.path.resolve()} (trajectory.csv, "
                "episode.json, scenario.yaml and plots per episode); the evaluation goes on "
                "without tracking"
            )
            self.warn(f"warning: {self.failure}")

    def _log_episode(self, result: EpisodeResult, episode_dir: Path) -> None:
        assert self.experiment_id is not None and self.parent_run_id is not None
        tags = {
            MLFLOW_PARENT_RUN_ID: self.parent_run_id,
            TAG_KIND: "episode",
            TAG_EVALUATION: self.evaluation_id,
            TAG_POLICY_PARAMS: json.dumps(dict(result.policy.params)),
        }
        if self.commit is not None:
            tags[MLFLOW_GIT_COMMIT] = self.commit
        name = episode_name(result.policy, result.seed)
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        run_id = run.info.run_id
        self.episode_run_ids[name] = run_id
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
        params = episode_params(result, self.evaluation_id, self.version, self.commit)
        log_in_batches(self.client, run_id, metrics, params)
        self.client.log_artifacts(run_id, str(episode_dir))
        _set_terminated(self.client, run_id, "FINISHED", io.StringIO())

    def finish(self, summaries: Sequence[PolicySummary], files: Sequence[Path]) -> None:
        """Log the summary on the parent run, with ``files`` as artifacts, and close it."""
        if self.failure is not None or self.parent_run_id is None or self.scenario_file is None:
            return  # the store failed, or the evaluation never started
        now_ms = int(time.time() * 1000)
        metrics = []
        for summary in summaries:
            for metric in summary.metrics:
                values = {
                    "mean": metric.estimate.mean,
                    "ci_low": metric.estimate.ci_low,
                    "ci_high": metric.estimate.ci_high,
                }
                for suffix, value in values.items():
                    if value is not None:
                        key = f"summary/{summary.label}/{metric.spec.name}/{suffix}"
                        metrics.append(Metric(key, value, now_ms, 0))
        try:
            log_in_batches(self.client, self.parent_run_id, metrics)
            for path in (*files, self.scenario_file):
                self.client.log_artifact(self.parent_run_id, str(path))
            _set_terminated(self.client, self.parent_run_id, "FINISHED", sys.stderr)
        except STORE_ERRORS as error:
            self.failure = TrackingError(
                f"tracking to {self.target.uri} failed while logging the evaluation summary: "
                f"{_first_line(error)}. Every episode is on disk in "
                f"{self.folder.path.resolve()}"
            )
            self.warn(f"warning: {self.failure}")


def _set_terminated(client: MlflowClient, run_id: str, status: str, links: TextIO) -> None:
    """End a run; MLflow's "View run" links for HTTP stores go to ``links``, not stdout.

    MLflow writes them to stdout, where they would break ``--json`` output.
    """
    with contextlib.redirect_stdout(links):
        client.set_terminated(run_id, status)


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class StoredEpisode:
    """An episode read back from the store.

    Attributes:
        run_id: its MLflow run.
        evaluation_id: the evaluation it belongs to.
        started_ms: when its run started (milliseconds since the epoch).
        experiment: the experiment's name.
        scenario: the scenario's name.
        scenario_hash: the scenario's content hash.
        kind: the scenario's kind.
        backend: the backend's name.
        score: policy, seed and metrics.
    """

    run_id: str
    evaluation_id: str
    started_ms: int
    experiment: str
    scenario: str
    scenario_hash: str
    kind: JobKind
    backend: str
    score: EpisodeScore


def load_episodes(
    client: MlflowClient, experiment: str | None = None, scenario: str | None = None
) -> list[StoredEpisode]:
    """Every finished episode run dlsched logged, optionally of one experiment or scenario.

    Raises:
        TrackingError: if ``experiment`` does not exist.
    """
    experiments = {str(e.experiment_id): e.name for e in _all_experiments(client)}
    if experiment is not None:
        ids = [eid for eid, name in experiments.items() if name == experiment]
        if not ids:
            raise TrackingError(
                f"no experiment {experiment!r} in {client.tracking_uri}; experiments there: "
                f"{sorted(experiments.values())}"
            )
    else:
        ids = list(experiments)
    if not ids:
        return []
    filters = [f"tags.`{TAG_KIND}` = 'episode'", "attributes.status = 'FINISHED'"]
    episodes = []
    token: str | None = None
    while True:
        page = client.search_runs(
            ids, " and ".join(filters), ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
        )
        episodes += [
            _stored(run, experiments[run.info.experiment_id])
            for run in page
            if scenario is None or run.data.params.get("scenario") == scenario
        ]
        token = page.token
        if not token:
            return episodes


def _all_experiments(client: MlflowClient) -> list[Experiment]:
    found: list[Experiment] = []
    token: str | None = None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def _stored(run: Run, experiment: str) -> StoredEpisode:
    params = run.data.params
    metrics = run.data.metrics
    policy_params = json.loads(run.data.tags.get(TAG_POLICY_PARAMS, "{}"))
    known = {field.name for field in dataclasses.fields(EpisodeMetrics)}
    values = {
        name: metrics[EPISODE_METRIC_PREFIX + name]
        for name in known
        if EPISODE_METRIC_PREFIX + name in metrics
    }
    return StoredEpisode(
        run_id=run.info.run_id,
        evaluation_id=params["evaluation"],
        started_ms=int(run.info.start_time),
        experiment=experiment,
        scenario=params["scenario"],
        scenario_hash=params["scenario.hash"],
        kind=JobKind(params["scenario.kind"]),
        backend=backend_label(
            params["backend"],
            {
                key.removeprefix(BACKEND_PARAM_PREFIX): value
                for key, value in params.items()
                if key.startswith(BACKEND_PARAM_PREFIX)
            },
        ),
        score=EpisodeScore(
            PolicyIdentity(params["policy"], tuple(sorted(policy_params.items()))),
            int(params["seed"]),
            EpisodeMetrics(**values),
        ),
    )
