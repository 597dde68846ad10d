"""A reproduction in MLflow: one parent run, one child run per claim.

- The **parent run** (tag ``dlsched.kind = reproduction``), named by the reproduction's id, holds
  the claims file's path, version and hash, the backend and seeds as params, the count of each
  verdict as metrics, and the report (Markdown, HTML, JSON, figures) and the claims file as
  artifacts.
- A **child run per claim**, named by the claim's id, holds how it is measured (params), the
  paper's value and ours with its interval (metrics ``paper``, ``mean``, ``ci_low``,
  ``ci_high``, and ``reading/<name>/mean`` for each reading) and its verdict and reason (tags
  ``dlsched.verdict``, ``dlsched.reason``), so ``mlflow ui`` can sort and filter claims.

Episodes are not logged one by one: a reproduction runs hundreds, and ``dlsched evaluate``
(whose command the report gives for each claim) records any of them in full.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID

from dlsched.envs.errors import TrackingError
from dlsched.runs.reproduce.report import counts
from dlsched.runs.reproduce.runner import DEFAULT_EXPERIMENT, ClaimResult, Reproduction
from dlsched.runs.tracking.run_logging import TAG_KIND, log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, first_line
from dlsched.runs.tracking.store import experiment_id as store_experiment_id
from dlsched.runs.tracking.target import TrackingTarget

TAG_VERDICT = "dlsched.verdict"
TAG_REASON = "dlsched.reason"


@dataclass(frozen=True)
class TrackedReproduction:
    """Where a reproduction is in MLflow.

    Attributes:
        tracking_uri: the store.
        experiment: the experiment's name.
        parent_run_id: the reproduction's run.
        claim_runs: each claim's run id, by claim id.
    """

    tracking_uri: str
    experiment: str
    parent_run_id: str
    claim_runs: Mapping[str, str]


def track_reproduction(
    client: MlflowClient,
    target: TrackingTarget,
    reproduction: Reproduction,
    reproduction_id: str,
    artifacts: Sequence[Path],
    *,
    experiment: str = DEFAULT_EXPERIMENT,
    version: str,
    commit: str | None,
) -> TrackedReproduction:
    """Log ``reproduction`` as a parent run with a child run per claim.

    Args:
        client: a client of a checked store (:func:`~dlsched.runs.tracking.store.connect`).
        target: where it tracks.
        reproduction: what ran.
        reproduction_id: the parent run's name (the local folder's name).
        artifacts: files and folders to log on the parent run.
        experiment: the experiment's name.
        version: the dlsched version.
        commit: the git commit, if known.

    Raises:
        TrackingError: the store refused a write; the message says where the local report is.
    """
    parent_id: str | None = None
    try:
        experiment_id = store_experiment_id(client, experiment, target)
        tags = {TAG_KIND: "reproduction"}
        if commit is not None:
            tags[MLFLOW_GIT_COMMIT] = commit
        parent = client.create_run(experiment_id, run_name=reproduction_id, tags=tags)
        parent_id = parent.info.run_id
        claims = reproduction.claims
        options = reproduction.options
        params = {
            "claims.file": str(claims.path),
            "claims.version": str(claims.version),
            "claims.hash": claims.content_hash,
            "claims.count": str(len(reproduction.results)),
            "backend": options.backend,
            "episodes": "per claim" if options.episodes is None else str(options.episodes),
            "first_seed": str(options.first_seed),
            "readings": str(options.readings),
            "dlsched.version": version,
        }
        now = int(time.time() * 1000)
        metrics = [
            Metric(f"claims/{verdict.value.replace(' ', '_')}", float(count), now, 0)
            for verdict, count in counts(reproduction.results).items()
        ]
        metrics.append(Metric("episodes", float(len(reproduction.episodes)), now, 0))
        log_in_batches(client, parent_id, metrics, params)
        claim_runs = {
            result.claim.id: _log_claim(client, experiment_id, parent_id, result, commit)
            for result in reproduction.results
        }
        for path in artifacts:
            if path.is_dir():
                client.log_artifacts(parent_id, str(path), artifact_path=path.name)
            else:
                client.log_artifact(parent_id, str(path))
        _terminate(client, parent_id)
    except STORE_ERRORS as error:
        if parent_id is not None:
            with contextlib.suppress(*STORE_ERRORS):  # the first error is the one to report
                _terminate(client, parent_id, "FAILED")
        raise TrackingError(
            f"tracking the reproduction to {target.uri} failed: {first_line(error)}. The report "
            f"is on disk ({', '.join(str(path) for path in artifacts[:1])}); "
            f"{target.fix_hint(lower=True)}"
        ) from error
    return TrackedReproduction(target.uri, experiment, parent_id, claim_runs)


def _log_claim(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    result: ClaimResult,
    commit: str | None,
) -> str:
    claim, measure, outcome = result.claim, result.measure, result.outcome
    tags = {
        MLFLOW_PARENT_RUN_ID: parent_id,
        TAG_KIND: "claim",
        TAG_VERDICT: outcome.judgement.verdict.value,
        TAG_REASON: outcome.judgement.reason,
    }
    if commit is not None:
        tags[MLFLOW_GIT_COMMIT] = commit
    run_id = client.create_run(experiment_id, run_name=claim.id, tags=tags).info.run_id
    params = {
        "paper": claim.paper,
        "section": claim.section,
        "figure": claim.figure,
        "unit": claim.unit,
        "scenario": measure.scenario,
        "policy": measure.policy,
        "reference": measure.reference or "",
        "statistic": measure.statistic,
        **{f"statistic.{key}": str(value) for key, value in measure.args},
        **{f"backend.{key}": value for key, value in measure.backend_options},
        "backend": result.backend,
        "seeds": ",".join(str(seed) for seed in result.seeds),
    }
    now = int(time.time() * 1000)
    values = {"paper": claim.value, "n": float(outcome.estimate.n)}
    values.update(
        mean=outcome.estimate.mean, ci_low=outcome.estimate.ci_low, ci_high=outcome.estimate.ci_high
    )
    for reading in result.readings:
        values[f"reading/{reading.reading}/mean"] = reading.estimate.mean
    metrics = [Metric(key, value, now, 0) for key, value in values.items() if value is not None]
    metrics += [
        Metric("value", value, now, index)
        for index, value in enumerate(outcome.values)
        if value is not None
    ]
    log_in_batches(client, run_id, metrics, params)
    _terminate(client, run_id)
    return run_id


def _terminate(client: MlflowClient, run_id: str, status: str = "FINISHED") -> None:
    # MLflow prints "View run" links for HTTP stores on stdout; keep stdout for the report.
    with contextlib.redirect_stdout(io.StringIO()):
        client.set_terminated(run_id, status)
