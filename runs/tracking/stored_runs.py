"""Episodes read back from the store, for ``compare`` and anything else that reads results."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities import Experiment, Run, ViewType

from dlsched.envs.errors import DlschedError, TrackingError, UnknownNameError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.metrics import EpisodeMetrics
from dlsched.runs.evaluation.records import EpisodeScore, PolicyIdentity, backend_label
from dlsched.runs.tracking.episode_run import (
    BACKEND_PARAM_PREFIX,
    EPISODE_METRIC_PREFIX,
    TAG_POLICY_PARAMS,
    episode_metric_key,
)
from dlsched.runs.tracking.run_logging import TAG_KIND
from dlsched.runs.tracking.store import STORE_ERRORS
from dlsched.runs.tracking.trajectory import SCENARIO_FILE


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

    @property
    def identity(self) -> tuple[str, str, int]:
        """What makes an episode one: its evaluation, policy and seed (the run's name within
        the evaluation); two runs of one identity hold the same episode."""
        return self.evaluation_id, self.score.policy.name, self.score.seed


def load_episodes(
    client: MlflowClient, experiment: str | None = None, scenario: str | None = None
) -> list[StoredEpisode]:
    """Every finished episode run dlsched logged, optionally of one experiment or scenario.

    Raises:
        TrackingError: if ``experiment`` does not exist.
        UnknownNameError: ``scenario`` is given, no episode ran it, and episodes of other
            scenarios are stored (a misspelt name: the message lists them, with the closest);
            an empty store gives an empty list.
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
    others: set[str] = set()  # the scenarios of the episodes left out
    token: str | None = None
    while True:
        page = client.search_runs(
            ids, " and ".join(filters), ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
        )
        for run in page:
            ran = run.data.params.get("scenario")
            if scenario is None or ran == scenario:
                episodes.append(_stored(run, experiments[run.info.experiment_id]))
            elif ran:
                others.add(ran)
        token = page.token
        if not token:
            break
    if scenario is not None and not episodes and others:
        raise UnknownNameError("scenario", scenario, others)
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
    values = {}
    for field in dataclasses.fields(EpisodeMetrics):
        # the headline's name today, then every field's name before it had one (older stores)
        for key in (episode_metric_key(field.name), EPISODE_METRIC_PREFIX + field.name):
            if key in metrics:
                values[field.name] = metrics[key]
                break
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


def stored_scenario(client: MlflowClient, episode: StoredEpisode) -> Scenario | None:
    """The scenario ``episode`` ran, read from its run's copy (``scenario.yaml``); ``None`` if
    the run holds none that reads as the scenario of its hash (a run the store lost the files
    of, or one written by a version whose scenarios this one does not read)."""
    with tempfile.TemporaryDirectory(prefix="dlsched-scenario-") as scratch:
        try:
            path = client.download_artifacts(episode.run_id, SCENARIO_FILE, scratch)
        except STORE_ERRORS:
            return None
        try:
            scenario = load_scenario(path)
        except DlschedError:
            return None
    return scenario if scenario.content_hash() == episode.scenario_hash else None
