"""The MLflow runs of an evaluation: a parent run per evaluation, a child run per episode.

Layout in the store (docs/tracking.md, "Runs and tracking"):

- one **experiment per scenario**, named after it (``--experiment`` names another);
- one **parent run per evaluation**, named by its evaluation id (scenario, UTC time, random
  suffix), so no evaluation ever reuses or overwrites another's run;
- one **child run per episode** (tag ``mlflow.parentRunId``), named ``<policy>-seed<seed>``, with
  params (policy and every parameter, scenario name, content hash and kind, backend, seed,
  dlsched version, git commit when the code runs from a checkout), per-step metrics (step =
  simulated second), per-episode metrics ``episode/<metric>``, and artifacts (the trajectory
  table, the scenario file, the episode record, and its plots when asked for) logged from the
  local episode folder of :mod:`dlsched.runs.tracking.trajectory`, which is written first.

The episode runs (:mod:`~dlsched.runs.tracking.episode_run`) are logged by an
:class:`~dlsched.runs.tracking.episode_writer.EpisodeWriter` beside the episodes, so that the
evaluation does not wait for the store between them; the parent run waits for it before its
summary.

Metrics and params go through :meth:`MlflowClient.log_batch` within MLflow's limits (1000 metrics,
100 params or tags, 1000 entities a call): one call per point is a store round trip each
(``docs/tracking.md``).

Nothing is lost when the store fails: every run carries its owner process
(:mod:`~dlsched.runs.tracking.owners`) and is ended in a ``finally`` (``KILLED`` on a signal,
``FAILED`` on an error); a store that stops answering mid-way is said at once (a tracking
server is watched by :class:`~dlsched.runs.tracking.server_watch.ServerWatch`), the evaluation
goes on untracked with every episode on disk, and ``dlsched runs sync <folder>``
(:mod:`~dlsched.runs.tracking.sync`) uploads them when the store is back.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from urllib.parse import urlparse

from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

from dlsched.envs.errors import TrackingError
from dlsched.envs.scenarios.file_format import dump_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.metrics import COST_METRIC, PRIMARY_METRIC
from dlsched.runs.evaluation.records import EpisodeResult, PolicyIdentity
from dlsched.runs.evaluation.summaries import PolicySummary
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.compare import ScenarioComparison, comparison_panels
from dlsched.runs.tracking.episode_run import (
    TAG_INCIDENTS,
    backend_params,
    policy_cost_key,
    policy_headline_key,
)
from dlsched.runs.tracking.episode_writer import (
    EpisodeHandled,
    EpisodeJob,
    EpisodeLogged,
    EpisodeRunContext,
    EpisodeWriter,
    Reply,
)
from dlsched.runs.tracking.evaluation_note import (
    NOTE_TAG,
    POLICIES_FILE,
    SHARED_VIEW_KEY,
    SHARED_VIEW_PREFIX,
    evaluation_note,
    experiment_note,
    shared_view,
)
from dlsched.runs.tracking.owners import TAG_ENDED_BY, end_run, owner_tags
from dlsched.runs.tracking.plots import (
    TIMELINE_FILE,
    PolicyTimeline,
    plot_comparison,
    plot_timeline,
)
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.run_logging import TAG_EVALUATION, TAG_KIND, log_in_batches
from dlsched.runs.tracking.server_watch import ServerWatch, brief_failure
from dlsched.runs.tracking.store import (
    STORE_ERRORS,
    experiment_id,
    first_line,
    set_experiment_tag,
)
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import (
    EvaluationFolder,
    TrackingRecord,
    episode_name,
    unique_id,
)

#: The experiment tag holding the content hash of the scenario its evaluations ran.
TAG_SCENARIO_HASH = "dlsched.scenario.hash"


def new_evaluation_id(scenario: Scenario) -> str:
    """A unique evaluation id: ``<scenario>-<UTC date-time>-<random hex>``."""
    return unique_id(scenario.name)


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
        self._named_experiment = experiment is not None
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
        self._timelines: dict[str, PolicyTimeline] = {}
        self._watch: ServerWatch | None = None
        # whether every episode has been handed to the writer: a failure from then on is said
        # once, when the evaluation ends, rather than as a warning that it goes on untracked
        self._episodes_over = False

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
                    self.experiment_id, run_name=self._run_name(), tags=tags
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
        self._episodes_over = True
        self._close_writer(hurry=kind is not None)
        if self._watch is not None:
            self._watch.stop()
        if kind is None or self.failure is not None or self.parent_run_id is None:
            return  # ended by finish(), or left to `dlsched runs sync` (and repair) if it failed
        status = "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        with contextlib.suppress(*STORE_ERRORS):  # the original exception is what matters
            end_run(self.client, self.parent_run_id, status, sys.stderr)

    def _run_name(self) -> str:
        """The parent run's name: its start (UTC), its evaluation id's random suffix (two
        evaluations started in one second differ) and its policies, in that order, since
        MLflow's runs table shows only a name's first 20 characters or so (the evaluation id,
        which begins with the scenario, the experiment's name already, is its tag)."""
        policies = ", ".join(dict.fromkeys(policy.name for policy in self.policies))
        suffix = self.evaluation_id.rsplit("-", 1)[-1]
        return f"{datetime.now(UTC):%H:%M:%S}-{suffix} {policies}"

    def _experiment(self) -> str:
        """The experiment's id: one experiment per scenario content (:data:`TAG_SCENARIO_HASH`).

        An edited copy of a scenario that kept its name would otherwise join the experiment of
        the original under the same title; it goes to ``<name>@<content hash>`` instead, and the
        warning names both hashes. An experiment named with ``--experiment`` is the user's
        choice: it is kept, with the same warning. One tracked before the tag existed takes the
        hash of its next evaluation.
        """
        scenario_hash = self.scenario.content_hash()
        existing = self.client.get_experiment_by_name(self.experiment_name)
        held = existing.tags.get(TAG_SCENARIO_HASH) if existing is not None else None
        if held is not None and held != scenario_hash:
            first = f"experiment {self.experiment_name!r} holds scenario content hash {held}"
            if not self._named_experiment:
                self.experiment_name = f"{self.scenario.name}@{scenario_hash}"
            self.warn(
                f"warning: scenario {self.scenario.name!r} has content hash {scenario_hash}, "
                f"but {first}; this evaluation goes to experiment {self.experiment_name!r}"
            )
        found = experiment_id(
            self.client,
            self.experiment_name,
            self.target,
            {"dlsched.scenario": self.scenario.name, TAG_SCENARIO_HASH: scenario_hash},
        )
        if existing is not None and held is None:
            set_experiment_tag(self.client, found, TAG_SCENARIO_HASH, scenario_hash)
        return found

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
        self._timelines.setdefault(result.policy.name, PolicyTimeline()).add(result)
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

    def wait_for_episodes(self, comparison: ScenarioComparison | None = None) -> None:
        """Wait until the writer has logged every episode handed to it (the timeline, and the
        chart of ``comparison``'s headlines, are drawn meanwhile); :attr:`episode_run_ids` is
        then complete. Once: later calls return at once."""
        self._episodes_over = True
        if self._writer is None or self._writer.closed:
            return
        if self.plots and comparison is not None and comparison.summaries:
            plot_comparison(comparison_panels([comparison]), self.folder.path / POLICIES_FILE)
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
        """Go on untracked from now on: :attr:`failure` says, for the end of the evaluation,
        where the episodes are and how to upload them; a warning says now, while episodes are
        still to come, that they are kept on disk only."""
        folder = self.folder.path.resolve()
        what = brief_failure(what)
        self.failure = TrackingError(
            f"tracking to {self.target.uri} failed: {what}; every episode is on disk, upload "
            f"them when the store answers: dlsched runs sync {folder}"
        )
        if not self._episodes_over:
            self.warn(
                f"warning: tracking to {self.target.uri} failed: {what}; the evaluation goes "
                f"on untracked, its episodes on disk in {folder}"
            )

    def finish(self, comparison: ScenarioComparison, files: Sequence[Path]) -> None:
        """Log the summary on the parent run, with ``files`` as artifacts, and close it; its
        note and the experiment's (:mod:`~dlsched.runs.tracking.evaluation_note`) show the
        headlines, their chart and the timeline in MLflow's UI."""
        self.wait_for_episodes(comparison)  # if the caller has not
        if self.failure is not None or self.parent_run_id is None or self.scenario_file is None:
            return  # the store failed, or the evaluation never started
        if self._watch is not None and self._watch.down:
            self._fail("the server stopped answering before the summary was logged")
            return
        metrics = summary_metrics(comparison.summaries, self.scenario.kind)
        drawn = (self.folder.path / name for name in (POLICIES_FILE, TIMELINE_FILE))
        images = [path for path in drawn if path.is_file()]
        note = evaluation_note(
            comparison, self.evaluation_id, self.parent_run_id, [path.name for path in images]
        )
        assert self.experiment_id is not None
        try:
            log_in_batches(self.client, self.parent_run_id, metrics, tags={NOTE_TAG: note})
            for path in (*files, *images, self.scenario_file):
                self.client.log_artifact(self.parent_run_id, str(path))
            set_experiment_tag(
                self.client,
                self.experiment_id,
                SHARED_VIEW_PREFIX + SHARED_VIEW_KEY,
                shared_view(comparison, self.evaluation_id),
            )
            set_experiment_tag(
                self.client,
                self.experiment_id,
                NOTE_TAG,
                experiment_note(comparison, self.experiment_id, self.parent_run_id, note),
            )
            end_run(self.client, self.parent_run_id, "FINISHED", sys.stderr)
        except STORE_ERRORS as error:
            self._fail(f"logging the evaluation summary failed: {first_line(error)}")


def summary_metrics(summaries: Sequence[PolicySummary], kind: JobKind) -> list[Metric]:
    """The parent run's metrics: each policy's mean headline, ``<policy> <headline>``
    (:func:`~dlsched.runs.tracking.episode_run.policy_headline_key`), and its mean cores
    allocated, ``<policy> cores allocated`` (:func:`~dlsched.runs.tracking.episode_run.
    policy_cost_key`), exact (the notes round them for people).

    Only these two (:data:`~dlsched.runs.evaluation.PRIMARY_METRIC`, what a policy achieves,
    and :data:`~dlsched.runs.evaluation.COST_METRIC`, what it costs) are metrics, so the run
    table shows them as columns per policy and MLflow's chart view draws a few charts, not one
    single-bar chart per policy, metric and interval end; every metric with its confidence
    interval is in the ``summary.json`` and ``summary.txt`` artifacts beside it.
    """
    now_ms = int(time.time() * 1000)
    primary = PRIMARY_METRIC[kind]
    return [
        Metric(key, mean, now_ms, 0)
        for summary in summaries
        for name, key in (
            (primary, policy_headline_key(kind, summary.label)),
            (COST_METRIC, policy_cost_key(summary.label)),
        )
        if (mean := summary.metric(name).estimate.mean) is not None
    ]
