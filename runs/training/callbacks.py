"""Callbacks of a training run: progress bar, rollout QoE, validation with early stopping.

Validation runs the agent as ``dlsched evaluate`` runs any policy (a
:class:`~dlsched.policies.learned.LearnedPolicy` holding the current network and normalisation
statistics) on held-out seeds, and logs the same metrics (``satisfied_fraction_mean``,
``mean_completion_s``, ...) under ``eval/<scenario>/``. On the replay backend its episodes run at
once on the batched environment, one ``predict`` per step for all of them
(:func:`dlsched.runs.evaluation.run_episodes`): faster than one single environment per seed
(``docs/performance.md``), and the same scores up to the rounding of a batched forward
pass. The model that scores best is saved; training stops when ``patience`` validations in a row
have not improved on it.
"""

from __future__ import annotations

import math
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize
from tqdm import tqdm

from dlsched.baselines import make as make_baseline
from dlsched.envs.rewards import CHARGING_REWARD, CORE_CHARGE
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies.learned import LearnedPolicy, ModelCard, save_model
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.metrics import metrics_for
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.evaluation.runners import at_once_refusal, run_episode, run_episodes
from dlsched.runs.evaluation.summaries import summarise


class ProgressBar(BaseCallback):
    """A tqdm bar of timesteps on stderr (SB3's own needs the ``rich`` package).

    Args:
        total: the timesteps of the run.
        enabled: ``False`` shows nothing.
    """

    def __init__(self, total: int, enabled: bool = True) -> None:
        super().__init__()
        self.total = total
        self.enabled = enabled
        self.bar: tqdm[None] | None = None

    def _on_training_start(self) -> None:
        planned = self.planned_steps()
        if planned != self.total:  # said once, whether or not the bar shows
            envs = self.training_env.num_envs
            unit = (
                f"rollouts of n_steps x environments = {self._n_steps():,} x {envs:,} steps"
                if hasattr(self.model, "n_steps")
                else f"steps of all {envs:,} environments"
            )
            print(
                f"note: --timesteps {self.total:,} rounds up to {planned:,}: training runs "
                f"whole {unit}",
                file=sys.stderr,
            )
        self.bar = tqdm(
            total=planned,
            unit="step",
            desc="training",
            file=sys.stderr,
            disable=not self.enabled,
            dynamic_ncols=True,
        )

    def planned_steps(self) -> int:
        """The timesteps SB3 will run: whole rollouts of ``n_steps`` per environment for an
        on-policy algorithm, whole vector steps otherwise (``--timesteps 20000`` with 8
        environments of 256 steps runs 20480)."""
        chunk = self.training_env.num_envs * self._n_steps()
        return -(-self.total // chunk) * chunk

    def _n_steps(self) -> int:
        """Steps of one environment in a rollout (an off-policy algorithm's: 1)."""
        return int(getattr(self.model, "n_steps", 1))

    def _on_step(self) -> bool:
        assert self.bar is not None
        self.bar.update(self.training_env.num_envs)
        return True

    def note(self, text: str) -> None:
        """Show ``text`` after the bar (the last validation score)."""
        if self.bar is not None:
            self.bar.set_postfix_str(text)

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """End the bar (SB3 does not end callbacks when training is interrupted)."""
        if self.bar is not None:
            self.bar.close()


class RolloutQoE(BaseCallback):
    """Logs ``rollout/satisfied_fraction``: satisfied over active jobs, averaged over the steps
    of each rollout (inference environments; ``info`` carries both counts)."""

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            active = info.get("active")
            if active:
                self.logger.record_mean("rollout/satisfied_fraction", info["satisfied"] / active)
        return True


@dataclass(frozen=True)
class ValidationRecord:
    """One validation: when, on what, the score and the metrics.

    Attributes:
        timesteps: training timesteps done when it ran.
        score: the selection score, higher is better (see :func:`validation_score`).
        metrics: mean across seeds of every metric ``evaluate`` reports, by
            ``<scenario>/<metric>``.
        improved: whether it beat every earlier validation (its model was kept).
    """

    timesteps: int
    score: float
    metrics: dict[str, float]
    improved: bool


def validation_score(results: Sequence[EpisodeResult], kind: JobKind, reward: str = "") -> float:
    """The number a validation is ranked by; higher is better.

    - inference: the mean over episodes of ``satisfied_fraction_mean``, ``evaluate``'s primary
      metric; for a model trained on ``satisfied_fraction_cores``, less the reward's charge
      (:data:`~dlsched.envs.rewards.CORE_CHARGE` times the share of the cluster's cores its
      limits held on average), so that the model kept is the one that pays for its cores;
    - training: minus the mean completion time of every job that arrived, counting a job that
      did not finish as completing at the episode's end (a censored time, so that an episode
      with unfinished jobs still has a score, and a worse one the more it leaves unfinished).
    """
    if kind is JobKind.INFERENCE:
        values = [
            r.metrics.satisfied_fraction_mean - _core_charge(r, reward)
            for r in results
            if r.metrics.satisfied_fraction_mean is not None
        ]
        return statistics.fmean(values) if values else 0.0
    completions = []
    for result in results:
        end_s = result.steps[-1].time_s
        for job in result.jobs:
            completion = job.completion_s
            completions.append(end_s - job.arrival_s if completion is None else completion)
    return -statistics.fmean(completions) if completions else -math.inf


def _core_charge(result: EpisodeResult, reward: str) -> float:
    """What ``reward`` charges an episode for the cores it held (0 for a reward blind to them)."""
    held = result.metrics.cores_allocated_mean
    if reward != CHARGING_REWARD or held is None:
        return 0.0
    return CORE_CHARGE * held / result.scenario.cluster_cores


class Validation(BaseCallback):
    """Evaluates the agent on held-out seeds every ``every`` timesteps; keeps the best model.

    Args:
        scenarios: the validation scenarios.
        seeds: the held-out ``reset`` seeds (never used for training).
        every: timesteps between two validations.
        patience: validations in a row without improvement after which training stops
            (0: never stop early).
        card: the model card of the run's models.
        normalizer: the training environments' normaliser, whose statistics the agent sees.
        best_folder: where the best model is saved (see :func:`save_model`).
        backend: the backend's registered name.
        report: called with each record (the progress bar shows it).
    """

    def __init__(
        self,
        scenarios: Sequence[Scenario],
        seeds: Sequence[int],
        every: int,
        patience: int,
        card: ModelCard,
        normalizer: VecNormalize,
        best_folder: Path,
        backend: str = "replay",
        report: Callable[[ValidationRecord], None] | None = None,
    ) -> None:
        super().__init__()
        self.scenarios = tuple(scenarios)
        self.seeds = tuple(seeds)
        self.every = every
        self.patience = patience
        self.card = card
        self.normalizer = normalizer
        self.best_folder = best_folder
        self.backend = backend
        self.report = report
        self.records: list[ValidationRecord] = []
        self.best_score = -math.inf
        self.stopped_early = False
        self._next = every
        #: per scenario, ``default``'s score on the validation seeds (training jobs only)
        self._reference: list[float] | None = None

    def _on_step(self) -> bool:
        if self.num_timesteps < self._next:
            return True
        self._next = self.num_timesteps + self.every
        self.validate()
        if self.patience and self._since_improvement() >= self.patience:
            self.stopped_early = True
            return False
        return True

    def validate(self) -> ValidationRecord:
        """Run the validation episodes now, log and keep the model if it is the best."""
        # Normalising reads the statistics, never updates them, so the live ones can be used.
        policy = LearnedPolicy(self.model, self.card, self.normalizer, source="training")
        kind = self.scenarios[0].kind
        scores: list[float] = []
        metrics: dict[str, float] = {}
        for scenario in self.scenarios:
            episodes = self._episodes(scenario, policy)
            scores.append(validation_score(episodes, kind, self.card.reward))
            (summary,) = summarise([episode.score for episode in episodes], kind)
            for spec in metrics_for(kind):
                mean = summary.metric(spec.name).estimate.mean
                if mean is not None:
                    metrics[f"{scenario.name}/{spec.name}"] = mean
        # the episodes fitted the live network to their layouts; it trains on its own
        policy.use_layout(self.card.input_layout)
        score = self._combined(scores, kind)
        improved = score > self.best_score
        if improved:
            self.best_score = score
            self._keep_best()
        record = ValidationRecord(self.num_timesteps, score, metrics, improved)
        self.records.append(record)
        for key, value in metrics.items():
            self.logger.record(f"eval/{key}", value)
        self.logger.record("eval/score", score)
        self.logger.record("eval/best_score", self.best_score)
        self.logger.record("time/total_timesteps", self.num_timesteps)
        self.logger.dump(self.num_timesteps)
        if self.report is not None:
            self.report(record)
        return record

    def _combined(self, scores: Sequence[float], kind: JobKind) -> float:
        """One score of a validation's per-scenario scores: their mean for inference (satisfied
        fractions, one scale); for training jobs on several scenarios, the mean over them of
        ``default``'s mean completion time over the model's (its speed-up), so that a scenario
        of long jobs does not outweigh one of short ones; on one, the score itself."""
        if kind is JobKind.INFERENCE or len(scores) == 1:
            return statistics.fmean(scores)
        if self._reference is None:
            default = make_baseline("default")
            self._reference = [
                validation_score(self._episodes(scenario, default), kind)
                for scenario in self.scenarios
            ]
        return statistics.fmean(
            reference / score if score < 0 else 0.0
            for reference, score in zip(self._reference, scores, strict=True)
        )

    def _episodes(self, scenario: Scenario, policy: Policy) -> list[EpisodeResult]:
        """One episode per held-out seed: all at once where the backend runs many, else one at
        a time."""
        if at_once_refusal(policy, self.backend, batched_predict=True) is None:
            return run_episodes(scenario, policy, self.seeds, self.backend)
        return [run_episode(scenario, policy, seed, self.backend) for seed in self.seeds]

    def _keep_best(self) -> None:
        """Save the model as the best one, whole or not at all.

        A training stopped by a signal keeps its best model: a folder cut short while it was
        written (the model without its card) must never take the place of the previous one.
        """
        staging = self.best_folder.with_name(self.best_folder.name + ".saving")
        shutil.rmtree(staging, ignore_errors=True)
        save_model(self.model, self.normalizer, self.card, staging)
        shutil.rmtree(self.best_folder, ignore_errors=True)
        staging.rename(self.best_folder)

    def _since_improvement(self) -> int:
        since = 0
        for record in reversed(self.records):
            if record.improved:
                break
            since += 1
        return since
