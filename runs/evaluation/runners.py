"""Running episodes: a policy on a scenario over seeds, every step recorded, each episode scored.

One episode is run exactly as a user of Gymnasium and Stable-Baselines3 would run it: the
environment wrapped in :class:`~dlsched.policies.TelemetryFeed`, and ``policy.predict(observation,
deterministic=True)`` at every step, so handcrafted and learned policies take the same path.

On the replay backend, :func:`evaluate` runs all seeds of a handcrafted policy at once on the
batched replay environment (:func:`run_episodes_batched`, one copy of the policy per episode),
which gives the same episodes faster; a policy the batch cannot serve (learned models, the
oracle, a placer of its own on several workers: :func:`~dlsched.policies.batched_feed.
batched_refusal`) and the Docker backend run one single environment per episode.

Every step is recorded (:func:`step_record`) and the episode is scored (:func:`episode_metrics`,
the metrics of :mod:`~dlsched.runs.evaluation.metrics`).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.metrics import EpisodeMetrics
from dlsched.runs.evaluation.records import (
    DEFAULT_POLICY,
    ContainerSample,
    EpisodeResult,
    JobOutcome,
    PolicyIdentity,
    StepRecord,
)

ENV_IDS: Mapping[JobKind, str] = {
    JobKind.INFERENCE: InferenceEnv.env_id,
    JobKind.TRAINING: TrainingEnv.env_id,
}


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
