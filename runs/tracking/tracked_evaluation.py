"""Evaluations as a user runs them: policies x seeds on a scenario, tracked in MLflow or not.

:func:`evaluate_tracked` writes every episode to its local folder as soon as it ends, and logs
it to MLflow while the next one runs (:class:`~dlsched.runs.tracking.tracker.EvaluationTracker`);
if the store fails mid-way, the evaluation goes on untracked and says where the local records
are.
:func:`evaluate_untracked` records nothing. Both return the summary table of
:mod:`dlsched.runs.tracking.compare`. ``dlsched evaluate`` is their command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dlsched.envs.errors import TrackingError
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.bounds import evaluation_bound
from dlsched.runs.evaluation.records import (
    EpisodeResult,
    EpisodeScore,
    PolicyIdentity,
    backend_label,
)
from dlsched.runs.evaluation.runners import check_evaluation_size, evaluation_episodes
from dlsched.runs.evaluation.summaries import summarise
from dlsched.runs.tracking.compare import ScenarioComparison, comparison_data, render_table
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import EvaluationFolder

# MLflow and the tracker (matplotlib) are imported by evaluate_tracked: an untracked evaluation
# does not wait for them (about 1.5 s)
if TYPE_CHECKING:
    from mlflow import MlflowClient


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate, as the command line gives it.

    Attributes:
        scenario: the scenario.
        policies: the built policies, in the order given.
        seeds: the seeds of every policy's episodes.
        backend: the backend's name.
        backend_options: keyword arguments of the backend's constructor.
        batched: run replay episodes on the batched environment where it gives the same
            records (``False``: every episode on a single environment; see
            :func:`~dlsched.runs.evaluation.evaluate`).
    """

    scenario: Scenario
    policies: tuple[Policy, ...]
    seeds: tuple[int, ...]
    backend: str
    backend_options: Mapping[str, str] = field(default_factory=dict)
    batched: bool = True


@dataclass(frozen=True)
class EvaluationLocation:
    """Where a tracked evaluation's records are.

    Attributes:
        id: the evaluation id (the parent run's name and the local folder's).
        tracking_uri: the MLflow store.
        experiment: the experiment's name.
        experiment_id: its id.
        parent_run_id: the evaluation's run.
        episode_runs: each episode's run id, by ``<policy>-seed<seed>``.
        local_folder: the local records.
    """

    id: str
    tracking_uri: str
    experiment: str
    experiment_id: str | None
    parent_run_id: str | None
    episode_runs: dict[str, str]
    local_folder: str


@dataclass(frozen=True)
class TrackedEvaluation:
    """The outcome of :func:`evaluate_tracked`.

    Attributes:
        comparison: the summary table.
        location: where the records are.
        failure: the store's failure after the evaluation started, if it failed.
        results: every episode, in the order they ran, if asked for (``keep_results``);
            otherwise empty: an evaluation keeps only its episodes' scores.
    """

    comparison: ScenarioComparison
    location: EvaluationLocation
    failure: TrackingError | None
    results: tuple[EpisodeResult, ...] = ()


def evaluate_untracked(request: EvaluationRequest, progress: bool = True) -> ScenarioComparison:
    """Run the evaluation and summarise it, recording nothing (and keeping only each episode's
    score, so that any number of episodes runs in bounded memory)."""
    with contextlib.closing(_episodes(request, progress)) as episodes:
        scores = [result.score for result in episodes]
    return comparison_of(request, scores, None)


def _episodes(request: EvaluationRequest, progress: bool) -> Generator[EpisodeResult, None, None]:
    return evaluation_episodes(
        request.scenario,
        request.policies,
        request.seeds,
        request.backend,
        progress=progress,
        backend_options=request.backend_options,
        batched=request.batched,
    )


def evaluate_tracked(
    request: EvaluationRequest,
    client: MlflowClient,
    target: TrackingTarget,
    out: Path,
    experiment: str | None = None,
    plots: bool = True,
    progress: bool = True,
    warn: Callable[[str], None] = print,
    episode_plots: bool = False,
    keep_results: bool = False,
) -> TrackedEvaluation:
    """Run the evaluation, recording every episode locally under ``out`` and in MLflow.

    Args:
        request: what to evaluate.
        client: a client from :func:`~dlsched.runs.tracking.store.connect` (the store was checked).
        target: where it tracks.
        out: parent folder of the local records.
        experiment: the MLflow experiment (default: the scenario's name).
        plots: draw and log the evaluation's timeline (satisfied services or finished jobs over
            time, a line per policy) on the parent run.
        progress: show a progress bar.
        warn: where warnings go.
        episode_plots: also draw and log every episode's plots (latency or completion times,
            limits and usage); they cost far more than the rest of the tracking.
        keep_results: return every episode's record too (memory grows with the episodes;
            without it only their scores are kept).

    Raises:
        ArgumentError: more episodes than :data:`~dlsched.runs.evaluation.MAX_EPISODES`
            (before anything is recorded).
    """
    from dlsched.runs.tracking.tracker import EvaluationTracker, new_evaluation_id

    check_evaluation_size(len(request.policies), len(request.seeds))

    evaluation_id = new_evaluation_id(request.scenario)
    folder = EvaluationFolder.of(out, evaluation_id)
    tracker = EvaluationTracker(
        client,
        target,
        request.scenario,
        folder,
        evaluation_id,
        request.backend,
        [PolicyIdentity.of(policy) for policy in request.policies],
        request.seeds,
        experiment=experiment,
        warn=warn,
        plots=plots,
        backend_options=request.backend_options,
        episode_plots=episode_plots,
    )
    results: list[EpisodeResult] = []
    scores: list[EpisodeScore] = []
    # the episodes are closed at once on a stop (not when collected): their progress bar ends
    # its line before the line that says what the stop did
    with tracker, contextlib.closing(_episodes(request, progress)) as episodes:
        for result in episodes:
            tracker.record_episode(result)
            scores.append(result.score)
            if keep_results:
                results.append(result)
        comparison = comparison_of(request, scores, evaluation_id)
        tracker.wait_for_episodes(comparison)
        location = EvaluationLocation(
            id=evaluation_id,
            tracking_uri=target.uri,
            experiment=tracker.experiment_name,
            experiment_id=tracker.experiment_id,
            parent_run_id=tracker.parent_run_id,
            episode_runs=dict(tracker.episode_run_ids),
            local_folder=str(folder.path.resolve()),
        )
        summary_json = folder.path / "summary.json"
        summary_txt = folder.path / "summary.txt"
        try:
            summary_json.write_text(json.dumps(summary_data(comparison, location), indent=2))
            summary_txt.write_text(render_table([comparison]) + "\n")
        except OSError as error:
            raise TrackingError(
                f"cannot write the summary to {folder.path.resolve()}: {error}; every episode "
                "is there. Free space there, or pass another --out"
            ) from None
        tracker.finish(comparison, [summary_json, summary_txt])
    return TrackedEvaluation(comparison, location, tracker.failure, tuple(results))


def comparison_of(
    request: EvaluationRequest, scores: Sequence[EpisodeScore], evaluation_id: str | None
) -> ScenarioComparison:
    """The summary table of an evaluation's episodes, from their scores, with the bound of
    its seeds where one is given (:mod:`dlsched.runs.evaluation.bounds`)."""
    bound = evaluation_bound(
        request.scenario, request.backend, request.backend_options, request.seeds
    )
    summaries = summarise(scores, request.scenario.kind, bound)
    return ScenarioComparison(
        scenario=request.scenario.name,
        scenario_hash=request.scenario.content_hash(),
        kind=request.scenario.kind,
        backend=backend_label(request.backend, request.backend_options),
        summaries=summaries,
        evaluations=(evaluation_id,) * len(summaries) if evaluation_id else (),
        bound=bound,
    )


def summary_data(
    comparison: ScenarioComparison, location: EvaluationLocation | None
) -> dict[str, object]:
    """The summary of an evaluation as JSON data (what ``--json`` prints and summary.json holds)."""
    return {
        "scenarios": comparison_data([comparison]),
        "evaluation": dataclasses.asdict(location) if location is not None else None,
    }
