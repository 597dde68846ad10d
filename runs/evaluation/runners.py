"""Running episodes: a policy on a scenario over seeds, every step recorded, each episode scored.

Episodes run on the batched environment (``gym.make_vec``), fed by :mod:`dlsched.policies.feed`:
a handcrafted policy decides from each episode's typed telemetry (a copy per episode), a learned
one predicts from the observations. On a batchable backend (replay), :func:`evaluate` runs all
seeds of a handcrafted policy at once (:func:`run_episodes`); a learned model (whose predict over
a batch rounds otherwise than over one observation) and a backend of one episode at a time
(Docker) run one episode at a time, on an environment of one episode.

Every step is recorded (:func:`step_record`), with the wall time of the policy's decision the
step applied, and the episode is scored (:func:`episode_metrics`, the metrics of
:mod:`~dlsched.runs.evaluation.metrics`; what it cost, :mod:`~dlsched.runs.evaluation.cost`).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import dlsched.envs  # noqa: F401  (registers the environment ids)
from dlsched.envs.backend_registry import backend_class, make_backend
from dlsched.envs.errors import ArgumentError
from dlsched.envs.inference_env import InferenceEnv
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.envs.size_bounds import SizeBound
from dlsched.envs.telemetry import JobState, QoEClass, Telemetry
from dlsched.envs.training_env import TrainingEnv
from dlsched.policies.feed import batched_feed, batched_refusal
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.cost import allocated_cores, cost_metrics, used_cores
from dlsched.runs.evaluation.metrics import EpisodeMetrics
from dlsched.runs.evaluation.records import (
    DEFAULT_POLICY,
    ContainerSample,
    EpisodeResult,
    JobOutcome,
    PolicyIdentity,
    StepRecord,
)
from dlsched.runs.interruption import deferred, raise_if_stopped

MAX_EPISODES = SizeBound("MAX_EPISODES", 100_000, "episodes in an evaluation (policies x seeds)")
"""Episodes one evaluation runs: memory is bounded whatever the count (episodes run in batches
and are handed over as they end, and only their scores are kept), but each takes time (about
20 a second on replay, minutes on Docker) and, tracked, a run in the store."""

#: Episodes run at once on the batched environment, at most: beyond a few hundred a batch steps
#: no faster (``dlsched bench replay``).
EPISODES_AT_ONCE = 256
#: Bytes the records and the replay draws of the episodes run at once may take, about: a batch
#: of a large cluster's (or of long training jobs') episodes is smaller.
BYTES_AT_ONCE = 200 << 20
#: Bytes of one container sample (one per job per step) in an episode's records, about.
SAMPLE_BYTES = 330
#: Bytes of one training iteration's draws (its work and its loss) in the replay engine.
ITERATION_BYTES = 16

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
    """Run one episode of ``policy`` on ``scenario`` and record it (:func:`run_episodes` with
    one seed: an environment of one episode, on any backend).

    Args:
        scenario: the scenario; its kind picks ``dlsched/Inference-v0`` or ``dlsched/Training-v0``.
        policy: any :class:`~dlsched.policies.Policy`; it is reset with the environment.
        seed: the ``reset`` seed (it draws the jobs and the backend's noise).
        backend: the backend's registered name.
        on_step: called with every step's record as soon as it is taken (progress display).
        backend_options: keyword arguments of the backend's constructor (e.g.
            ``{"workload_threading": "stock"}`` for Docker).

    Returns:
        The episode's record and scores.
    """
    return run_episodes(scenario, policy, [seed], backend, on_step, backend_options)[0]


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
    progress_traces: tuple[ProgressTrace, ...] = (),
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
        progress_traces=progress_traces,
    )


def at_once_refusal(policy: Policy, backend: str, batched_predict: bool = False) -> str | None:
    """Why :func:`run_episodes` should not run several seeds of ``policy`` at once on
    ``backend``; ``None`` if it can (``batched_predict``: accept a learned model's predict over
    a batch, as a validation during training does; ``evaluate`` does not)."""
    if not backend_class(backend).capabilities.batchable:
        return f"the {backend} backend runs one episode at a time"
    return batched_refusal(policy, batched_predict)


def run_episodes(
    scenario: Scenario,
    policy: Policy,
    seeds: Sequence[int],
    backend: str = "replay",
    on_step: Callable[[StepRecord], None] | None = None,
    backend_options: Mapping[str, str] | None = None,
) -> list[EpisodeResult]:
    """Run one episode of ``policy`` per seed, all at once on one batched environment.

    Episode ``i`` is the episode a single environment reset with ``seeds[i]`` runs: a
    handcrafted policy runs a copy of itself per episode that reads its typed telemetry, and its
    whole decision (migrations included) steps the batch. Any other policy predicts for all of
    them at once; a learned model's episodes then equal single environments' up to that batch's
    rounding (:mod:`~dlsched.policies.feed`), which :func:`at_once_refusal` accepts only with
    ``batched_predict``.

    Args:
        scenario: the scenario.
        policy: a policy the batch can run (:func:`at_once_refusal` says which), or any policy
            for one seed.
        seeds: one episode per seed.
        backend: the backend's registered name; several seeds need a batchable one.
        on_step: called with every step's record of every episode as soon as it is taken.
        backend_options: keyword arguments of the backend's constructor.

    Returns:
        One record per seed, in the order of ``seeds``.

    Raises:
        PolicyError: the batch cannot run ``policy``, or it refuses the scenario.
        BackendError: several seeds on a backend that runs one episode at a time.
    """
    raise_if_stopped()  # before its containers start, too
    options = dict(backend_options or {})
    vector = gym.make_vec(
        ENV_IDS[scenario.kind],
        num_envs=len(seeds),
        vectorization_mode="vector_entry_point",
        scenario=scenario,
        backend=backend,
        backend_options=options,
    )
    env = vector.unwrapped
    assert isinstance(env, SchedulingVectorEnv)
    try:
        feed = batched_feed(env, policy)
        first = feed.reset(seeds)
        steps = [[step_record(0, telemetry, None)] for telemetry in first]
        finals: list[Telemetry] = list(first)
        terminated = [False] * len(seeds)
        running = np.ones(len(seeds), dtype=bool)
        while running.any():
            # a stop Python dropped (in a garbage collection) ends the episode here, not later
            raise_if_stopped()
            step = feed.step(running)
            for index in np.flatnonzero(running).tolist():
                telemetry = step.telemetry[index]
                assert telemetry is not None  # built for every running episode
                record = step_record(
                    len(steps[index]),
                    telemetry,
                    float(step.rewards[index]),
                    float(step.decision_s[index]),
                )
                steps[index].append(record)
                if on_step is not None:
                    on_step(record)
                if step.terminated[index] or step.truncated[index]:
                    running[index] = False
                    finals[index] = telemetry
                    terminated[index] = bool(step.terminated[index])
        incidents = [env.incidents(index) for index in range(len(seeds))]
        traces = [env.progress_traces(index) for index in range(len(seeds))]
    finally:
        vector.close()
    return [
        episode_result(
            scenario,
            policy,
            seed,
            backend,
            steps[index],
            finals[index],
            terminated[index],
            options,
            incidents[index],
            traces[index],
        )
        for index, seed in enumerate(seeds)
    ]


def step_record(
    step: int, telemetry: Telemetry, reward: float | None, decision_s: float | None = None
) -> StepRecord:
    """Record a telemetry snapshot as the state after step ``step`` (``decision_s``: the wall
    time of the policy's decision the step applied; ``None`` at the reset)."""
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
                throttle_ratio=job.throttle_ratio,
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
        cores_allocated=allocated_cores(telemetry),
        cores_used=used_cores(telemetry),
        decision_s=decision_s,
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
    cost = cost_metrics(kind, steps)
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
            **cost,
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
        **cost,
    )


def check_backend(
    scenario: Scenario, backend: str, backend_options: Mapping[str, str] | None = None
) -> None:
    """Check that ``backend`` could start an episode of ``scenario`` now (a real backend's
    engines answer), starting nothing: a command asks before it opens its tracking run.

    Raises:
        BackendError: it could not, saying why and the fix.
    """
    ready = make_backend(backend, **dict(backend_options or {}))
    try:
        ready.check_ready(scenario)
    finally:
        ready.close()


def check_evaluation_size(policies: int, seeds: int) -> None:
    """Refuse an evaluation of more than :data:`MAX_EPISODES` episodes before any runs.

    Raises:
        ArgumentError: naming the count, the limit and the variable that raises it.
    """
    if MAX_EPISODES.exceeded(policies * seeds):
        raise ArgumentError(
            f"{policies} polic{'y' if policies == 1 else 'ies'} x {seeds:,} episodes = "
            f"{policies * seeds:,} episodes: expected {MAX_EPISODES.expected()}; run fewer "
            "--episodes, or several evaluations with --seed K (each starts at seed K)"
        )


def episodes_at_once(scenario: Scenario) -> int:
    """How many of ``scenario``'s episodes :func:`evaluation_episodes` runs at once on the replay
    engine: at most :data:`EPISODES_AT_ONCE`, and few enough that their records and draws take
    about :data:`BYTES_AT_ONCE`.

    Raises:
        ScenarioError, UnknownNameError: the scenario does not fit its replay profiles.
    """
    samples = scenario.max_jobs * (math.ceil(scenario.horizon_s / scenario.interval_s) + 1)
    iterations = ProfileTable(scenario).max_iterations
    episode_bytes = samples * SAMPLE_BYTES + iterations * ITERATION_BYTES
    return max(1, min(EPISODES_AT_ONCE, BYTES_AT_ONCE // max(episode_bytes, 1)))


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
    """Run every policy for every seed and keep every episode's record
    (:func:`evaluation_episodes`, collected; its arguments, and ``on_episode`` called with each
    record as it ends).

    Returns:
        The records in the order they ran (:func:`evaluation_episodes`; ``default`` first).
    """
    results = []
    episodes = evaluation_episodes(
        scenario, policies, seeds, backend, progress, backend_options, batched
    )
    with contextlib.closing(episodes):  # its progress bar ends its line at once on a stop
        for result in episodes:
            results.append(result)
            if on_episode is not None:
                on_episode(result)
    return results


def evaluation_episodes(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    backend: str = "replay",
    progress: bool = True,
    backend_options: Mapping[str, str] | None = None,
    batched: bool = True,
) -> Generator[EpisodeResult, None, None]:
    """Run every policy for every seed, ``default`` first so that others can be set against it,
    and hand over each episode's record as it ends: a caller that keeps only what it needs of
    each (its score) evaluates any number of episodes in bounded memory.

    Where a policy's seeds can run at once (:func:`at_once_refusal`: a batchable backend, a
    handcrafted policy), they do (:func:`run_episodes`), :func:`episodes_at_once` of them at a
    time: the same records, faster. Every other policy runs one episode at a time
    (:func:`run_episode`).

    On a backend that runs one episode at a time (a real host), the episodes go in rounds, a
    seed each: every policy runs the round's seed before any runs the next. A host's speed
    drifts by 10-20% over the half hour such an evaluation takes (``docs/fidelity.md``); run
    policy after policy, the drift would fall on the last ones and read as their difference.

    Args:
        scenario: the scenario every episode runs.
        policies: the policies, each run on every seed (the same seeds for all: paired samples).
        seeds: the ``reset`` seeds.
        backend: the backend's registered name.
        progress: show a progress bar on stderr.
        backend_options: keyword arguments of the backend's constructor.
        batched: ``False`` runs one episode at a time (slower; for debugging a policy).

    Yields:
        The records, policy by policy and in the order of ``seeds`` within a policy (seed by
        seed, policies in order within a seed, on a backend that runs one episode at a time); a
        batch's records when the last of its episodes ends.

    Raises:
        ArgumentError: more than :data:`MAX_EPISODES` episodes (before any runs).
    """
    check_evaluation_size(len(policies), len(seeds))
    ordered = sorted(policies, key=lambda policy: policy.name != DEFAULT_POLICY)
    options = dict(backend_options or {})
    steps_per_episode = math.ceil(scenario.horizon_s / scenario.interval_s)
    bar = tqdm(
        total=len(ordered) * len(seeds) * steps_per_episode,
        desc=scenario.name,
        unit="step",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    if backend_class(backend).capabilities.batchable:
        episodes = _policy_by_policy(scenario, ordered, seeds, backend, options, batched, bar)
    else:
        episodes = _in_rounds(scenario, ordered, seeds, backend, options, bar)
    try:
        with contextlib.closing(episodes):
            for result in episodes:
                # a training episode that terminates early leaves its remaining steps unused
                bar.update(steps_per_episode - (len(result.steps) - 1))
                yield result
    finally:
        # a stop between the bar's last write and its newline would put the line that says
        # what the stop did at the end of the bar's
        with deferred():
            bar.close()


def _policy_by_policy(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    backend: str,
    backend_options: Mapping[str, str],
    batched: bool,
    bar: tqdm[Any],
) -> Generator[EpisodeResult, None, None]:
    """Every seed of a policy, then the next policy's; a policy's seeds at once where they can
    be (:func:`at_once_refusal`)."""
    for policy in policies:
        if batched and len(seeds) > 1 and at_once_refusal(policy, backend) is None:
            at_once = episodes_at_once(scenario)
            yield from _batches(scenario, policy, seeds, backend, backend_options, at_once, bar)
        else:
            yield from _one_at_a_time(scenario, policy, seeds, backend, backend_options, bar)


def _in_rounds(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    backend: str,
    backend_options: Mapping[str, str],
    bar: tqdm[Any],
) -> Generator[EpisodeResult, None, None]:
    """Every policy's episode of a seed, then the next seed's, one at a time."""
    for seed in seeds:
        for policy in policies:
            yield from _one_at_a_time(scenario, policy, [seed], backend, backend_options, bar)


def _batches(
    scenario: Scenario,
    policy: Policy,
    seeds: Sequence[int],
    backend: str,
    backend_options: Mapping[str, str],
    at_once: int,
    bar: tqdm[Any],
) -> Iterator[EpisodeResult]:
    """``policy``'s episodes ``at_once`` seeds at a time, each batch's yielded as it ends."""
    for start in range(0, len(seeds), at_once):
        batch = seeds[start : start + at_once]
        bar.set_postfix_str(f"{policy.name} {len(batch)} seeds at once", refresh=False)
        yield from run_episodes(
            scenario,
            policy,
            batch,
            backend,
            on_step=lambda _: bar.update(),
            backend_options=backend_options,
        )


def _one_at_a_time(
    scenario: Scenario,
    policy: Policy,
    seeds: Sequence[int],
    backend: str,
    backend_options: Mapping[str, str],
    bar: tqdm[Any],
) -> Iterator[EpisodeResult]:
    """``policy``'s episodes one at a time, each yielded as soon as it ends."""
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
