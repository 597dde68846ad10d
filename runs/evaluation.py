"""The evaluation harness: run policies on a scenario over seeds, and summarise what they achieved.

One episode is run exactly as a user of Gymnasium and Stable-Baselines3 would run it: the
environment wrapped in :class:`~dlsched.policies.TelemetryFeed`, and ``policy.predict(observation,
deterministic=True)`` at every step, so handcrafted and learned policies take the same path.

On the replay backend, :func:`evaluate` runs all seeds of a handcrafted policy at once on the
batched replay environment (:func:`run_episodes_batched`, one copy of the policy per episode),
which gives the same episodes faster; a policy the batch cannot serve (learned models, the
oracle, a placer of its own on several workers: :func:`~dlsched.policies.batched_feed.
batched_refusal`) and the Docker backend run one single environment per episode.

Every step is recorded (:class:`StepRecord`, with one :class:`ContainerSample` per job), the
episode is scored (:class:`EpisodeMetrics`), and the scores of many seeds are summarised per
policy (:class:`PolicySummary`): the mean, a 95% Student-t confidence interval across seeds, and
the ratio to the ``default`` and ``oracle`` policies when they were evaluated too.

Metrics (see :data:`METRICS`):

- inference: the fraction of active jobs that are satisfied (DQoES's set S, journal Section V),
  averaged over the episode's steps and read at its end; the number of jobs in S, G and B at the
  end (the journal reports these counts, e.g. 26 against 3 on the 40-model cluster).
- training: the mean completion time (arrival to finish) and the makespan (first arrival to last
  finish), FlowCon's measures (journal, Section 6); both are undefined for an episode in which a
  job did not finish, and ``unfinished_jobs`` counts such jobs.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import dlsched.envs  # noqa: F401  (registers the environment ids)
from dlsched.envs.inference_env import InferenceEnv
from dlsched.envs.replay.vector import BATCHED_BACKEND_OPTIONS, ReplayVectorEnv
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.telemetry import JobState, QoEClass, Telemetry
from dlsched.envs.training_env import TrainingEnv
from dlsched.policies.batched_feed import batched_feed, batched_refusal
from dlsched.policies.feed import TelemetryFeed
from dlsched.policies.policy import ParamValue, Policy

#: The policy every other one is compared with: the environment's free competition.
DEFAULT_POLICY = "default"
#: The privileged upper reference, where it applies.
ORACLE_POLICY = "oracle"
#: Confidence level of the intervals across seeds.
CONFIDENCE = 0.95

ENV_IDS: Mapping[JobKind, str] = {
    JobKind.INFERENCE: InferenceEnv.env_id,
    JobKind.TRAINING: TrainingEnv.env_id,
}


# ---------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ContainerSample:
    """One job at one step, as measured (a row of the trajectory table).

    Attributes:
        job_id: the job's id in the episode.
        workload: the workload it runs.
        state: waiting, running, migrating, done or failed.
        worker: its worker, ``None`` while waiting.
        limit: CPU limit in force, a fraction of its worker's cores (1 = uncapped).
        limit_cores: the same limit in cores.
        cpu_usage: cores it used over the last interval.
        latency_s: last batch latency (inference), ``None`` before the first batch.
        target_s: latency target (inference).
        tolerance: satisfaction tolerance ``alpha``.
        qoe_class: G, S or B (inference), ``None`` without a measurement.
        loss: last reported loss (training), ``None`` before the first iteration.
        iterations: training iterations completed.
    """

    job_id: str
    workload: str
    state: JobState
    worker: int | None
    limit: float
    limit_cores: float
    cpu_usage: float
    latency_s: float | None
    target_s: float | None
    tolerance: float
    qoe_class: QoEClass | None
    loss: float | None
    iterations: int


@dataclass(frozen=True)
class StepRecord:
    """The state after one environment step (step 0 is the state right after ``reset``).

    Attributes:
        step: index of the step; 0 is the reset.
        time_s: seconds since the episode started.
        reward: the environment's reward for the step, ``None`` at the reset.
        active_jobs: jobs holding a slot.
        satisfied: active inference jobs in S.
        g: active inference jobs in G (faster than needed).
        b: active inference jobs in B (too slow).
        q_g: DQoES's ``Q_G``, the sum of ``q_i = o_i - p_i`` over G, in seconds (Alg. 1 line 8).
        q_b: DQoES's ``Q_B``, the same sum over B (negative).
        total_limit: the limits of active jobs summed in cores, over the cluster's cores
            (above 1 means the caps overcommit the cluster).
        finished_jobs: training jobs done.
        containers: every job that has arrived, in arrival order.
    """

    step: int
    time_s: float
    reward: float | None
    active_jobs: int
    satisfied: int
    g: int
    b: int
    q_g: float
    q_b: float
    total_limit: float
    finished_jobs: int
    containers: tuple[ContainerSample, ...]

    @property
    def satisfied_fraction(self) -> float | None:
        """Satisfied over active jobs, ``None`` when none is active."""
        return self.satisfied / self.active_jobs if self.active_jobs else None


@dataclass(frozen=True)
class JobOutcome:
    """When one job arrived and, for training, when it finished (and the tiers it aimed at)."""

    job_id: str
    workload: str
    arrival_s: float
    completed_s: float | None
    loss_targets: tuple[float, float] | None = None

    @property
    def completion_s(self) -> float | None:
        """Seconds from arrival to finish, ``None`` if it did not finish."""
        return None if self.completed_s is None else self.completed_s - self.arrival_s


@dataclass(frozen=True)
class EpisodeMetrics:
    """One episode's scores; a metric that does not apply to the scenario's kind is ``None``.

    See :data:`METRICS` for what each one means.
    """

    episode_return: float
    satisfied_fraction_mean: float | None = None
    satisfied_fraction_final: float | None = None
    satisfied_final: float | None = None
    g_final: float | None = None
    b_final: float | None = None
    mean_completion_s: float | None = None
    makespan_s: float | None = None
    unfinished_jobs: float | None = None

    def defined(self) -> dict[str, float]:
        """The metrics that have a value, by name."""
        return {
            field.name: value
            for field in dataclasses.fields(self)
            if (value := getattr(self, field.name)) is not None
        }


@dataclass(frozen=True)
class MetricSpec:
    """How one field of :class:`EpisodeMetrics` is named, read and ranked.

    Attributes:
        name: the field of :class:`EpisodeMetrics` (and the MLflow metric ``episode/<name>``).
        label: short column header.
        description: one line for the JSON output and the docs.
        kinds: the scenario kinds it applies to.
        higher_is_better: the direction that wins.
        decimals: digits shown in tables.
        low: the least value it can take (``None``: unbounded); confidence intervals are
            clipped to ``[low, high]``.
        high: the largest value it can take (``None``: unbounded).
    """

    name: str
    label: str
    description: str
    kinds: tuple[JobKind, ...]
    higher_is_better: bool
    decimals: int
    low: float | None = 0.0
    high: float | None = None


_INFERENCE = (JobKind.INFERENCE,)
_TRAINING = (JobKind.TRAINING,)
_BOTH = (JobKind.INFERENCE, JobKind.TRAINING)

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "satisfied_fraction_mean",
        "sat.frac mean",
        "satisfied / active jobs, averaged over the steps with an active job",
        _INFERENCE,
        True,
        3,
        high=1.0,
    ),
    MetricSpec(
        "satisfied_fraction_final",
        "sat.frac end",
        "satisfied / active jobs at the end of the episode",
        _INFERENCE,
        True,
        3,
        high=1.0,
    ),
    MetricSpec("satisfied_final", "|S| end", "jobs in S at the end", _INFERENCE, True, 1),
    MetricSpec(
        "g_final", "|G| end", "jobs in G (faster than needed) at the end", _INFERENCE, False, 1
    ),
    MetricSpec("b_final", "|B| end", "jobs in B (too slow) at the end", _INFERENCE, False, 1),
    MetricSpec(
        "mean_completion_s",
        "mean compl. s",
        "mean seconds from arrival to finish (undefined if a job did not finish)",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "makespan_s",
        "makespan s",
        "seconds from the first arrival to the last finish (undefined if a job did not finish)",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "unfinished_jobs",
        "unfinished",
        "training jobs not finished when the episode ended",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "episode_return", "return", "sum of the environment's rewards", _BOTH, True, 2, low=None
    ),
)

#: Each metric's spec by name.
METRIC_SPECS: Mapping[str, MetricSpec] = {spec.name: spec for spec in METRICS}

#: The metric the ratios in tables and the comparison plot are about, per kind.
PRIMARY_METRIC: Mapping[JobKind, str] = {
    JobKind.INFERENCE: "satisfied_fraction_mean",
    JobKind.TRAINING: "mean_completion_s",
}


def metrics_for(kind: JobKind) -> tuple[MetricSpec, ...]:
    """The metrics that apply to a scenario kind, in display order."""
    return tuple(spec for spec in METRICS if kind in spec.kinds)


@dataclass(frozen=True)
class PolicyIdentity:
    """A policy as tracked: its registered name and every parameter, sorted by name."""

    name: str
    params: tuple[tuple[str, ParamValue], ...] = ()

    @classmethod
    def of(cls, policy: Policy) -> PolicyIdentity:
        return cls(policy.name, tuple(sorted(policy.params().items())))


@dataclass(frozen=True)
class EpisodeScore:
    """What a summary needs of one episode: whose it is, its seed, its metrics."""

    policy: PolicyIdentity
    seed: int
    metrics: EpisodeMetrics


@dataclass(frozen=True)
class EpisodeResult:
    """Everything recorded of one episode.

    Attributes:
        policy: the policy and its parameters.
        scenario: the scenario it ran.
        backend: ``replay`` or ``docker``.
        seed: the ``reset`` seed.
        steps: the reset state and every step after it.
        jobs: arrival and completion of every job that arrived.
        metrics: the episode's scores.
        backend_options: the keyword arguments the backend was built with.
        incidents: what the backend reported that makes the figures doubtful (see
            :meth:`~dlsched.envs.backend.Backend.incidents`); an episode with incidents is
            tagged so in MLflow.
    """

    policy: PolicyIdentity
    scenario: Scenario
    backend: str
    seed: int
    steps: tuple[StepRecord, ...]
    jobs: tuple[JobOutcome, ...]
    metrics: EpisodeMetrics
    backend_options: Mapping[str, str] = field(default_factory=dict)
    incidents: tuple[str, ...] = ()

    @property
    def score(self) -> EpisodeScore:
        return EpisodeScore(self.policy, self.seed, self.metrics)


def backend_label(backend: str, options: Mapping[str, str]) -> str:
    """How a comparison names a backend and its options: ``docker[workload_threading=stock]``.

    Episodes of one scenario are compared only with others of the same label, so that, e.g.,
    stock and tuned workloads on Docker are never one table.
    """
    if not options:
        return backend
    return f"{backend}[{','.join(f'{key}={options[key]}' for key in sorted(options))}]"


# ---------------------------------------------------------------------------------- episodes


def run_episode(
    scenario: Scenario,
    policy: Policy,
    seed: int,
    backend: str = "replay",
    on_step: Callable[[StepRecord], None] | None = None,
    backend_options: Mapping[str, str] | None = None,
) -> EpisodeResult:
    """Run one episode of ``policy`` on ``scenario`` and record it.

    Args:
        scenario: the scenario; its kind picks ``dlsched/Inference-v0`` or ``dlsched/Training-v0``.
        policy: any :class:`~dlsched.policies.Policy`; it is reset by the environment wrapper.
        seed: the ``reset`` seed (it draws the jobs and the backend's noise).
        backend: the backend's registered name.
        on_step: called with every step's record as soon as it is taken (progress display).
        backend_options: keyword arguments of the backend's constructor (e.g.
            ``{"workload_threading": "stock"}`` for Docker).

    Returns:
        The episode's record and scores.
    """
    options = dict(backend_options or {})
    env = TelemetryFeed(
        gym.make(
            ENV_IDS[scenario.kind], scenario=scenario, backend=backend, backend_options=options
        ),
        policy,
    )
    try:
        observation, info = env.reset(seed=seed)
        steps = [step_record(0, info["telemetry"], None)]
        terminated = truncated = False
        while not (terminated or truncated):
            action, _ = policy.predict(observation, deterministic=True)
            observation, reward, terminated, truncated, info = env.step(action)
            steps.append(step_record(len(steps), info["telemetry"], float(reward)))
            if on_step is not None:
                on_step(steps[-1])
        scheduling = env.unwrapped
        assert isinstance(scheduling, SchedulingEnv)
        incidents = scheduling.backend.incidents()
    finally:
        env.close()
    return episode_result(
        scenario, policy, seed, backend, steps, info["telemetry"], terminated, options, incidents
    )


def episode_result(
    scenario: Scenario,
    policy: Policy,
    seed: int,
    backend: str,
    steps: Sequence[StepRecord],
    final: Telemetry,
    terminated: bool,
    backend_options: Mapping[str, str],
    incidents: tuple[str, ...] = (),
) -> EpisodeResult:
    """The record of an episode that ended: its steps, its jobs as ``final`` shows them, its
    scores (``terminated``: it ended by itself, not by the horizon)."""
    jobs = tuple(
        JobOutcome(job.job_id, job.workload, job.arrival_s, job.completed_s, job.loss_targets)
        for job in final.jobs
    )
    return EpisodeResult(
        policy=PolicyIdentity.of(policy),
        scenario=scenario,
        backend=backend,
        seed=seed,
        steps=tuple(steps),
        jobs=jobs,
        metrics=episode_metrics(scenario.kind, steps, jobs, all_arrived=terminated),
        backend_options=dict(backend_options),
        incidents=incidents,
    )


def batched_path_refusal(
    scenario: Scenario,
    policy: Policy,
    backend: str,
    backend_options: Mapping[str, str],
    batched_predict: bool = False,
) -> str | None:
    """Why :func:`run_episodes_batched` cannot run ``policy`` here; ``None`` if it can
    (``batched_predict`` as there)."""
    if backend != "replay":
        return f"the batched environment runs the replay backend only, not {backend!r}"
    unknown = sorted(set(backend_options) - set(BATCHED_BACKEND_OPTIONS))
    if unknown:
        return f"the batched environment takes no backend options {unknown}"
    return batched_refusal(policy, scenario, batched_predict)


def run_episodes_batched(
    scenario: Scenario,
    policy: Policy,
    seeds: Sequence[int],
    on_step: Callable[[StepRecord], None] | None = None,
    backend_options: Mapping[str, str] | None = None,
    batched_predict: bool = False,
) -> list[EpisodeResult]:
    """Run one episode of ``policy`` per seed, all at once on the batched replay environment.

    The episodes are those :func:`run_episode` runs on the replay backend with the same seeds
    (``tests/test_batched_evaluation.py`` holds them equal): one copy of the policy per episode
    reads its typed telemetry and its whole decision, migrations included, steps the batch.
    With ``batched_predict`` a policy that predicts over a batch (a learned model) makes one
    ``predict`` per step for all of them instead, and its episodes equal single environments'
    up to that batch's rounding (:mod:`~dlsched.policies.batched_feed`).

    Args:
        scenario: the scenario.
        policy: a policy the batch can run (:func:`batched_path_refusal` says which).
        seeds: one episode per seed.
        on_step: called with every step's record of every episode as soon as it is taken.
        backend_options: the replay backend's options.
        batched_predict: let a policy that predicts over a batch do so (validation during
            training); ``evaluate`` does not.

    Returns:
        One record per seed, in the order of ``seeds``.

    Raises:
        PolicyError: the batched environment cannot run ``policy``, or it refuses the scenario.
    """
    options = dict(backend_options or {})
    vector = gym.make_vec(
        ENV_IDS[scenario.kind],
        num_envs=len(seeds),
        vectorization_mode="vector_entry_point",
        scenario=scenario,
        backend_options=options,
    )
    env = vector.unwrapped
    assert isinstance(env, ReplayVectorEnv)
    try:
        feed = batched_feed(env, policy, batched_predict)
        first = feed.reset(seeds)
        steps = [[step_record(0, telemetry, None)] for telemetry in first]
        finals: list[Telemetry] = list(first)
        terminated = [False] * len(seeds)
        running = np.ones(len(seeds), dtype=bool)
        while running.any():
            step = feed.step(running)
            for index in np.flatnonzero(running).tolist():
                telemetry = step.telemetry[index]
                assert telemetry is not None  # built for every running episode
                record = step_record(len(steps[index]), telemetry, float(step.rewards[index]))
                steps[index].append(record)
                if on_step is not None:
                    on_step(record)
                if step.terminated[index] or step.truncated[index]:
                    running[index] = False
                    finals[index] = telemetry
                    terminated[index] = bool(step.terminated[index])
    finally:
        vector.close()
    return [
        episode_result(
            scenario,
            policy,
            seed,
            "replay",
            steps[index],
            finals[index],
            terminated[index],
            options,
        )
        for index, seed in enumerate(seeds)
    ]


def step_record(step: int, telemetry: Telemetry, reward: float | None) -> StepRecord:
    """Record a telemetry snapshot as the state after step ``step``."""
    cores = {worker.index: worker.cores for worker in telemetry.workers}
    containers = []
    for job in telemetry.jobs:
        worker_cores = cores[job.worker] if job.worker is not None else 0.0
        containers.append(
            ContainerSample(
                job_id=job.job_id,
                workload=job.workload,
                state=job.state,
                worker=job.worker,
                limit=job.limit,
                limit_cores=job.limit * worker_cores,
                cpu_usage=job.cpu_usage,
                latency_s=job.latency_s,
                target_s=job.target_s,
                tolerance=job.tolerance,
                qoe_class=job.qoe_class,
                loss=job.loss,
                iterations=job.iterations,
            )
        )
    active = telemetry.active_jobs
    # Each job's class once (it is a property computed on every read), its quality in its set.
    qualities: dict[QoEClass, list[float | None]] = {qoe: [] for qoe in QoEClass}
    for job in active:
        qoe_class = job.qoe_class
        if qoe_class is not None:
            qualities[qoe_class].append(job.quality_s)
    cluster_cores = sum(cores.values())
    return StepRecord(
        step=step,
        time_s=telemetry.time_s,
        reward=reward,
        active_jobs=len(active),
        satisfied=len(qualities[QoEClass.S]),
        g=len(qualities[QoEClass.G]),
        b=len(qualities[QoEClass.B]),
        q_g=float(sum(q for q in qualities[QoEClass.G] if q is not None)),
        q_b=float(sum(q for q in qualities[QoEClass.B] if q is not None)),
        total_limit=sum(c.limit_cores for c in containers if c.state in _ACTIVE) / cluster_cores,
        finished_jobs=sum(1 for job in telemetry.jobs if job.state is JobState.DONE),
        containers=tuple(containers),
    )


_ACTIVE = (JobState.RUNNING, JobState.MIGRATING)


def episode_metrics(
    kind: JobKind, steps: Sequence[StepRecord], jobs: Sequence[JobOutcome], all_arrived: bool
) -> EpisodeMetrics:
    """Score an episode from its steps (step 0 first) and the jobs that arrived.

    ``all_arrived`` says whether every job of the episode arrived (a training episode that
    terminated); without it the completion times of a training episode are undefined.
    """
    episode_return = float(sum(step.reward for step in steps if step.reward is not None))
    if kind is JobKind.INFERENCE:
        fractions = [f for step in steps[1:] if (f := step.satisfied_fraction) is not None]
        last = steps[-1]
        return EpisodeMetrics(
            episode_return=episode_return,
            satisfied_fraction_mean=statistics.fmean(fractions) if fractions else None,
            satisfied_fraction_final=last.satisfied_fraction,
            satisfied_final=float(last.satisfied),
            g_final=float(last.g),
            b_final=float(last.b),
        )
    completions = [job.completion_s for job in jobs]
    finished = [c for c in completions if c is not None]
    all_finished = all_arrived and bool(jobs) and len(finished) == len(jobs)
    return EpisodeMetrics(
        episode_return=episode_return,
        mean_completion_s=statistics.fmean(finished) if all_finished else None,
        makespan_s=(
            max(job.completed_s for job in jobs if job.completed_s is not None)
            - min(job.arrival_s for job in jobs)
            if all_finished
            else None
        ),
        unfinished_jobs=float(len(jobs) - len(finished)),
    )


def evaluate(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    backend: str = "replay",
    on_episode: Callable[[EpisodeResult], None] | None = None,
    progress: bool = True,
    backend_options: Mapping[str, str] | None = None,
    batched: bool = True,
) -> list[EpisodeResult]:
    """Run every policy for every seed, ``default`` first so that others can be set against it.

    Where the batched replay environment can run a policy (:func:`batched_path_refusal`), all
    its seeds run at once there (:func:`run_episodes_batched`): the same records, faster. Every
    other policy runs one single environment per seed (:func:`run_episode`).

    Args:
        scenario: the scenario every episode runs.
        policies: the policies, each run on every seed (the same seeds for all: paired samples).
        seeds: the ``reset`` seeds.
        backend: the backend's registered name.
        on_episode: called with each episode's record once it ends (tracking); a policy's
            batched episodes are handed over when the last of them ends, in the order of
            ``seeds``.
        progress: show a progress bar on stderr.
        backend_options: keyword arguments of the backend's constructor.
        batched: ``False`` runs every episode on a single environment (the reference path, for
            debugging; slower).

    Returns:
        The records, policy by policy and in the order of ``seeds`` within a policy.
    """
    ordered = sorted(policies, key=lambda policy: policy.name != DEFAULT_POLICY)
    options = dict(backend_options or {})
    results = []
    steps_per_episode = math.ceil(scenario.horizon_s / scenario.interval_s)
    with tqdm(
        total=len(ordered) * len(seeds) * steps_per_episode,
        desc=scenario.name,
        unit="step",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    ) as bar:
        for policy in ordered:
            episodes: Iterable[EpisodeResult]
            if (
                batched
                and seeds
                and batched_path_refusal(scenario, policy, backend, options) is None
            ):
                bar.set_postfix_str(f"{policy.name} {len(seeds)} seeds batched", refresh=False)
                episodes = run_episodes_batched(
                    scenario, policy, seeds, on_step=lambda _: bar.update(), backend_options=options
                )
            else:
                episodes = _single_episodes(scenario, policy, seeds, backend, options, bar)
            for result in episodes:
                # a training episode that terminates early leaves its remaining steps unused
                bar.update(steps_per_episode - (len(result.steps) - 1))
                results.append(result)
                if on_episode is not None:
                    on_episode(result)
    return results


def _single_episodes(
    scenario: Scenario,
    policy: Policy,
    seeds: Sequence[int],
    backend: str,
    backend_options: Mapping[str, str],
    bar: tqdm[Any],
) -> Iterator[EpisodeResult]:
    """``policy``'s episodes on one single environment each, each yielded as soon as it ends."""
    for seed in seeds:
        bar.set_postfix_str(f"{policy.name} seed {seed}", refresh=False)
        yield run_episode(
            scenario,
            policy,
            seed,
            backend,
            on_step=lambda _: bar.update(),
            backend_options=backend_options,
        )


# ---------------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Estimate:
    """A mean across seeds with its confidence interval.

    Attributes:
        mean: the mean of the defined values, ``None`` if there is none.
        ci_low: lower end of the 95% Student-t interval; ``None`` with fewer than two values
            (the interval is undefined, not zero).
        ci_high: upper end.
        n: how many episodes had a value.
        clipped: whether the interval was cut at the range the metric can take (a fraction
            below 0, a count below 0), which leaves it asymmetric around the mean.
    """

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    clipped: bool = False

    @property
    def half_width(self) -> float | None:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2


def estimate(
    values: Sequence[float], low: float | None = None, high: float | None = None
) -> Estimate:
    """Mean and 95% Student-t confidence interval of independent samples (here: seeds).

    Args:
        values: one value per seed.
        low: the least value the metric can take; the interval is clipped to it (a satisfied
            fraction of 0.034 +- 0.051 cannot reach below 0).
        high: the largest value the metric can take.
    """
    if not values:
        return Estimate(None, None, None, 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(mean, None, None, len(values))
    # Student's t quantile (scipy.stats.t.ppf computes it with this function): scipy.special
    # is imported here, not scipy.stats at the top (0.8 s before any command could answer)
    from scipy.special import stdtrit

    sem = statistics.stdev(values) / math.sqrt(len(values))
    half = float(stdtrit(len(values) - 1, (1 + CONFIDENCE) / 2)) * sem
    ci_low = mean - half if low is None else max(mean - half, low)
    ci_high = mean + half if high is None else min(mean + half, high)
    return Estimate(
        mean, ci_low, ci_high, len(values), clipped=(ci_low, ci_high) != (mean - half, mean + half)
    )


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one policy across seeds, and its ratio to the reference policies.

    A ratio is the policy's mean over the reference's mean, ``None`` where the reference was not
    evaluated, has no value, or its mean is 0.
    """

    spec: MetricSpec
    estimate: Estimate
    ratio_to_default: float | None = None
    ratio_to_oracle: float | None = None


@dataclass(frozen=True)
class PolicySummary:
    """One policy's results on one scenario.

    Attributes:
        policy: the policy and its parameters.
        label: how tables name it (the policy's name unless that is ambiguous).
        seeds: the seeds of its episodes, ascending.
        metrics: one summary per metric that applies to the scenario's kind.
    """

    policy: PolicyIdentity
    label: str
    seeds: tuple[int, ...]
    metrics: tuple[MetricSummary, ...]

    def metric(self, name: str) -> MetricSummary:
        for summary in self.metrics:
            if summary.spec.name == name:
                return summary
        raise KeyError(name)


def summarise_policy(label: str, scores: Sequence[EpisodeScore], kind: JobKind) -> PolicySummary:
    """Summarise one policy's episodes (all of the same policy); ratios are left unset."""
    ordered = sorted(scores, key=lambda score: score.seed)  # a fixed order for the sums
    identities = {score.policy for score in ordered}
    if len(identities) != 1:
        raise ValueError(f"one summary, several policies: {sorted(map(str, identities))}")
    metrics = tuple(
        MetricSummary(
            spec,
            estimate(
                [value for s in ordered if (value := getattr(s.metrics, spec.name)) is not None],
                spec.low,
                spec.high,
            ),
        )
        for spec in metrics_for(kind)
    )
    return PolicySummary(ordered[0].policy, label, tuple(score.seed for score in ordered), metrics)


def with_ratios(
    summary: PolicySummary, default: PolicySummary | None, oracle: PolicySummary | None
) -> PolicySummary:
    """``summary`` with every metric's ratio to the ``default`` and ``oracle`` summaries."""
    metrics = tuple(
        dataclasses.replace(
            metric,
            ratio_to_default=_ratio(metric, default),
            ratio_to_oracle=_ratio(metric, oracle),
        )
        for metric in summary.metrics
    )
    return dataclasses.replace(summary, metrics=metrics)


def _ratio(metric: MetricSummary, reference: PolicySummary | None) -> float | None:
    if reference is None or metric.estimate.mean is None:
        return None
    base = reference.metric(metric.spec.name).estimate.mean
    if base is None or base == 0:
        return None
    return metric.estimate.mean / base


def summarise(scores: Iterable[EpisodeScore], kind: JobKind) -> tuple[PolicySummary, ...]:
    """Summarise the episodes of one scenario per policy, with ratios to ``default``/``oracle``.

    Policies keep the order of their first episode. Each policy name may appear with one set of
    parameters only (an evaluation builds each policy once).
    """
    grouped: dict[PolicyIdentity, list[EpisodeScore]] = {}
    for score in scores:
        grouped.setdefault(score.policy, []).append(score)
    names = [identity.name for identity in grouped]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"policies evaluated with several parameter sets: {duplicated}")
    plain = [summarise_policy(identity.name, group, kind) for identity, group in grouped.items()]
    by_name = {summary.policy.name: summary for summary in plain}
    default, oracle = by_name.get(DEFAULT_POLICY), by_name.get(ORACLE_POLICY)
    return tuple(with_ratios(summary, default, oracle) for summary in plain)


def to_jsonable(value: Any) -> Any:
    """A dataclass tree (enums, tuples, nested dataclasses) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Enum):
        return value.value
    return value
