"""Run the claims: every episode they need, once, then each claim's statistic and verdict.

Claims share episodes (the 10-job FlowCon run answers four claims), so :func:`reproduce` first
plans every episode the selected claims need (scenario x policy and parameters x seed, plus each
reading of the policy's pseudocode and each variant of an investigation), runs each once, and
then computes, per claim, the statistic of every seed, its estimate and the verdict
(:mod:`.verdict`).

The episodes run as ``dlsched evaluate`` runs them (:func:`~dlsched.runs.evaluation.runners.
evaluation_episodes`), so its numbers are those of ``dlsched evaluate`` with the same seeds: the
seeds of one scenario, policy and parameters (an :class:`EpisodeGroup`) at once on the batched
environment where the backend allows, and on a simulated backend the groups in as many processes
as this process has cores (:func:`run_episodes`); ``docs/reproduction.md`` says how long the
shipped claims take.

On the Docker backend a claim runs its host-scale *twin*; a claim without one is skipped and
says so.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from dlsched.baselines.registry import make
from dlsched.envs.backend_registry import backend_class
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.policy import ParamValue
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.evaluation.runners import evaluation_episodes, run_episode
from dlsched.runs.evaluation.summaries import Estimate, estimate
from dlsched.runs.reproduce.claims import Claim, ClaimsFile, Diagnostic, Investigation, Measure
from dlsched.runs.reproduce.statistics import STATISTICS, ArgValue, EpisodePair
from dlsched.runs.reproduce.verdict import Judgement, judge

#: The name of the papers' own parameters among the readings.
DEFAULT_READING = "default"
#: The MLflow experiment reproductions go to unless told otherwise (here, not in
#: :mod:`.tracking`, so that ``dlsched reproduce --help`` shows it without importing MLflow).
DEFAULT_EXPERIMENT = "dlsched-reproduce"

Params = tuple[tuple[str, ParamValue], ...]


@dataclass(frozen=True)
class Options:
    """How to run the claims.

    Attributes:
        backend: ``replay``, or ``docker`` (the claims' twins).
        episodes: seeds per claim; ``None`` takes each claim's own ``seeds``.
        first_seed: the first seed (seeds ``first_seed ... first_seed + episodes - 1``).
        readings: also run the readings of the pseudocode and the investigations.
        processes: processes the episodes run in on a simulated backend; ``None``: one per
            core this process may use (:func:`usable_cores`).
    """

    backend: str = "replay"
    episodes: int | None = None
    first_seed: int = 0
    readings: bool = True
    processes: int | None = None


@dataclass(frozen=True)
class EpisodeKey:
    """One episode: which scenario, policy and parameters, seed, backend."""

    scenario: str
    policy: str
    params: Params
    seed: int
    backend: str
    backend_options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EpisodeGroup:
    """The episodes of one scenario, policy and parameters on one backend, a seed each: what
    the batched environment runs at once (:func:`run_group`).

    Attributes:
        scenario: the scenario's name or path.
        policy: the baseline's name.
        params: its parameters that differ from the paper's.
        backend: the backend's name.
        backend_options: the backend's options.
        seeds: the seeds, in the order planned.
    """

    scenario: str
    policy: str
    params: Params
    backend: str
    backend_options: tuple[tuple[str, str], ...]
    seeds: tuple[int, ...]

    def keys(self) -> list[EpisodeKey]:
        """Its episodes, in the order of its seeds."""
        return [
            EpisodeKey(
                self.scenario, self.policy, self.params, seed, self.backend, self.backend_options
            )
            for seed in self.seeds
        ]


def episode_groups(keys: Sequence[EpisodeKey]) -> list[EpisodeGroup]:
    """``keys`` grouped by all but their seed, each group where its first key stood."""
    seeds: dict[tuple[str, str, Params, str, tuple[tuple[str, str], ...]], list[int]] = {}
    for key in keys:
        group = (key.scenario, key.policy, key.params, key.backend, key.backend_options)
        seeds.setdefault(group, []).append(key.seed)
    return [EpisodeGroup(*group, tuple(dict.fromkeys(each))) for group, each in seeds.items()]


@dataclass(frozen=True)
class Outcome:
    """A claim's statistic under one reading of its policy.

    Attributes:
        reading: ``default`` (the paper's parameters) or the reading's name.
        params: the parameters that differ from the default.
        values: the statistic of every seed (``None`` where undefined).
        estimate: their mean and 95% confidence interval.
        judgement: the verdict and its reason.
    """

    reading: str
    params: Params
    values: tuple[float | None, ...]
    estimate: Estimate
    judgement: Judgement


@dataclass(frozen=True)
class ClaimResult:
    """One claim, as it ran.

    Attributes:
        claim: the claim.
        measure: the measure that ran (the claim's, or its twin on Docker).
        backend: the backend.
        seeds: the seeds of its episodes.
        outcome: under the paper's parameters: the row of the report and its verdict.
        readings: under each reading of the policy's pseudocode.
    """

    claim: Claim
    measure: Measure
    backend: str
    seeds: tuple[int, ...]
    outcome: Outcome
    readings: tuple[Outcome, ...] = ()


@dataclass(frozen=True)
class VariantRow:
    """One variant of an investigation: its diagnostics and the claim's verdict under it."""

    variant: str
    params: Params
    diagnostics: tuple[Estimate, ...]
    claim: Outcome


@dataclass(frozen=True)
class InvestigationResult:
    """An investigation's table: one row per variant (default, readings, extra variants)."""

    investigation: Investigation
    claim: Claim
    rows: tuple[VariantRow, ...]


@dataclass(frozen=True)
class Skipped:
    """A claim that did not run, and why."""

    claim: Claim
    reason: str


@dataclass(frozen=True)
class Reproduction:
    """Everything a run of the claims produced.

    Attributes:
        claims: the claims file (the selection that ran).
        options: how it ran.
        results: one per claim that ran, in the file's order.
        skipped: the claims that did not run.
        investigations: the investigations' tables.
        episodes: every episode, by key (the figures are drawn from them).
        labels: how the report names each policy and parameter set (``dqoes[preprint-listener]``).
    """

    claims: ClaimsFile
    options: Options
    results: tuple[ClaimResult, ...]
    skipped: tuple[Skipped, ...] = ()
    investigations: tuple[InvestigationResult, ...] = ()
    episodes: Mapping[EpisodeKey, EpisodeResult] = field(default_factory=dict)
    labels: Mapping[tuple[str, Params], str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class _Variant:
    name: str
    params: Params


@dataclass(frozen=True)
class _Job:
    """A claim (or an investigation) to evaluate: its measure, seeds and variants."""

    claim: Claim
    measure: Measure
    seeds: tuple[int, ...]
    variants: tuple[_Variant, ...]


def _measure_of(claim: Claim, backend: str) -> Measure | None:
    if backend == "replay":
        return claim.measure
    return claim.twin


def _seeds(measure: Measure, options: Options) -> tuple[int, ...]:
    count = options.episodes if options.episodes is not None else measure.seeds
    return tuple(range(options.first_seed, options.first_seed + count))


def _keys(job: _Job, backend: str) -> Iterable[EpisodeKey]:
    measure = job.measure
    for seed in job.seeds:
        for variant in job.variants:
            yield EpisodeKey(
                measure.scenario,
                measure.policy,
                variant.params,
                seed,
                backend,
                measure.backend_options,
            )
        if measure.reference is not None:
            yield EpisodeKey(
                measure.scenario, measure.reference, (), seed, backend, measure.backend_options
            )


# ---------------------------------------------------------------------------------- running


def reproduce(
    claims: ClaimsFile, options: Options | None = None, progress: bool = True
) -> Reproduction:
    """Run every claim of ``claims`` (and its readings and investigations) and judge it.

    Args:
        claims: the claims (see :func:`~dlsched.runs.reproduce.claims_loader.load_claims`).
        options: backend, seeds, readings, processes (default: :class:`Options`'s defaults).
        progress: show a progress bar of the episodes on stderr, with the claims they measure.

    Returns:
        The results, in the claims file's order.
    """
    options = options or Options()
    jobs: list[_Job] = []
    skipped: list[Skipped] = []
    labels: dict[tuple[str, Params], str] = {}
    for claim in claims.claims:
        measure = _measure_of(claim, options.backend)
        if measure is None:
            skipped.append(Skipped(claim, f"no host-scale twin for the {options.backend} backend"))
            continue
        variants = [_Variant(DEFAULT_READING, ())]
        if options.readings:
            variants += [_Variant(r.name, r.params) for r in claims.readings_of(measure.policy)]
        jobs.append(_Job(claim, measure, _seeds(measure, options), tuple(variants)))
    investigation_jobs: list[tuple[Investigation, _Job]] = []
    if options.readings:
        by_id = {job.claim.id: job for job in jobs}
        for investigation in claims.investigations:
            base = by_id.get(investigation.claim)
            if base is None:
                continue
            extra = tuple(_Variant(v.name, v.params) for v in investigation.variants)
            investigation_jobs.append(
                (investigation, _Job(base.claim, base.measure, base.seeds, base.variants + extra))
            )
    everything = [*jobs, *(job for _, job in investigation_jobs)]
    for job in everything:
        labels.setdefault((job.measure.policy, ()), job.measure.policy)
        if job.measure.reference is not None:
            labels.setdefault((job.measure.reference, ()), job.measure.reference)
        for variant in job.variants[1:]:
            labels.setdefault(
                (job.measure.policy, variant.params), f"{job.measure.policy}[{variant.name}]"
            )

    planned = dict.fromkeys(key for job in everything for key in _keys(job, options.backend))
    claims_of: dict[EpisodeKey, list[str]] = {}
    for job in everything:
        for key in _keys(job, options.backend):
            said = claims_of.setdefault(key, [])
            if job.claim.id not in said:
                said.append(job.claim.id)
    episodes = run_episodes(
        list(planned),
        progress,
        options.processes,
        describe=lambda group: _claims_text(claims_of[group.keys()[0]]),
    )

    results = tuple(_judge_claim(claims, job, episodes, options.backend) for job in jobs)
    investigations = tuple(
        _investigate(claims, investigation, job, episodes, options.backend)
        for investigation, job in investigation_jobs
    )
    return Reproduction(claims, options, results, tuple(skipped), investigations, episodes, labels)


def _claims_text(ids: Sequence[str]) -> str:
    """The claims an episode group measures, as the progress bar names them."""
    return ids[0] + (f" (+{len(ids) - 1})" if len(ids) > 1 else "")


def run_key(key: EpisodeKey, scenario: Scenario) -> EpisodeResult:
    """Run one planned episode through the evaluation harness (an environment of one episode)."""
    return run_episode(
        scenario,
        make(key.policy, **dict(key.params)),
        key.seed,
        key.backend,
        backend_options=dict(key.backend_options),
    )


def run_group(group: EpisodeGroup) -> list[EpisodeResult]:
    """Run a group's episodes as ``dlsched evaluate`` runs one policy's seeds: at once on the
    batched environment where the backend and the policy allow, otherwise one at a time."""
    episodes = evaluation_episodes(
        load_scenario(group.scenario),
        [make(group.policy, **dict(group.params))],
        group.seeds,
        group.backend,
        progress=False,
        backend_options=dict(group.backend_options),
    )
    return list(episodes)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or ``taskset``
    narrows), at least 1."""
    return max(1, len(os.sched_getaffinity(0)))


def run_episodes(
    keys: Sequence[EpisodeKey],
    progress: bool = True,
    processes: int | None = None,
    describe: Callable[[EpisodeGroup], str] | None = None,
) -> dict[EpisodeKey, EpisodeResult]:
    """Run each episode of ``keys`` once, with a progress bar naming what runs.

    The episodes are grouped (:func:`episode_groups`) and a group runs at once
    (:func:`run_group`). On a simulated backend the groups run in ``processes`` worker processes
    (``None``: :func:`usable_cores`), the largest first so that none is left running alone at
    the end; each episode is the one its seed gives wherever it runs. On a real host they run
    one after the other, as an episode there is measured on the host's cores.

    Args:
        keys: the episodes.
        progress: show a progress bar on stderr.
        processes: worker processes on a simulated backend; 1 runs everything here.
        describe: what the bar says a group is (default: its scenario and policy).

    Returns:
        Every episode's record, in the order of ``keys``.
    """
    groups = episode_groups(keys)
    scenarios = {name: load_scenario(name) for name in {group.scenario for group in groups}}
    groups.sort(key=lambda group: _group_cost(group, scenarios[group.scenario]), reverse=True)
    describe = describe or (lambda group: f"{group.scenario} {group.policy}")
    count = processes if processes is not None else usable_cores()
    simulated = all(backend_class(g.backend).capabilities.simulated_time for g in groups)
    forked = "fork" in multiprocessing.get_all_start_methods()
    workers = min(count, len(groups)) if simulated and forked else 1
    done: dict[EpisodeKey, EpisodeResult] = {}
    # the workers are forked before the bar exists: none inherits its lock or its thread
    with (
        _group_results(groups, workers) as results,
        tqdm(
            total=len(keys), desc="reproduce", unit="episode", file=sys.stderr, disable=not progress
        ) as bar,
    ):
        running = list(groups)
        bar.set_postfix_str(_running_text(running, workers, describe))
        for group, episodes in results:
            done.update(zip(group.keys(), episodes, strict=True))
            running.remove(group)
            if running:
                bar.set_postfix_str(_running_text(running, workers, describe), refresh=False)
            bar.update(len(episodes))
    return {key: done[key] for key in keys}


def _group_cost(group: EpisodeGroup, scenario: Scenario) -> float:
    """A group's work, about: its episodes' job-steps."""
    steps = math.ceil(scenario.horizon_s / scenario.interval_s)
    return scenario.max_jobs * steps * len(group.seeds)


def _running_text(
    running: Sequence[EpisodeGroup], workers: int, describe: Callable[[EpisodeGroup], str]
) -> str:
    """What runs now: the first ``workers`` groups not done (they are handed out in order),
    each description once (two readings of one claim's policy run side by side)."""
    return "; ".join(dict.fromkeys(describe(group) for group in running[:workers]))


@contextlib.contextmanager
def _group_results(
    groups: Sequence[EpisodeGroup], workers: int
) -> Iterator[Iterator[tuple[EpisodeGroup, list[EpisodeResult]]]]:
    """The groups' episodes as they end, from ``workers`` forked processes (or here, with 1);
    leaving stops the processes, whatever ended the loop.

    A worker ignores SIGINT: Ctrl-C reaches the whole process group, and this process stops
    them. Its exceptions come back as the same types where they pickle, otherwise as a
    ``RuntimeError`` naming the type (one that does not unpickle would hang the pool).
    """
    if workers == 1:
        yield ((group, run_group(group)) for group in groups)
        return
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_in_worker)
    try:
        yield pool.imap_unordered(_run_group_in_worker, groups)
    finally:
        pool.terminate()
        pool.join()


def _in_worker() -> None:
    """A worker process's start: Ctrl-C is its parent's to handle, SIGTERM ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run_group_in_worker(group: EpisodeGroup) -> tuple[EpisodeGroup, list[EpisodeResult]]:
    try:
        return group, run_group(group)
    except Exception as error:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:
            raise RuntimeError(f"{type(error).__name__}: {error}") from None
        raise


# ---------------------------------------------------------------------------------- judging


def _pairs(
    measure: Measure,
    params: Params,
    seeds: Sequence[int],
    episodes: Mapping[EpisodeKey, EpisodeResult],
    backend: str,
) -> list[EpisodePair]:
    options = measure.backend_options
    pairs = []
    for seed in seeds:
        own = episodes[EpisodeKey(measure.scenario, measure.policy, params, seed, backend, options)]
        reference = None
        if measure.reference is not None:
            reference = episodes[
                EpisodeKey(measure.scenario, measure.reference, (), seed, backend, options)
            ]
        pairs.append(EpisodePair(own, reference))
    return pairs


def _values(
    statistic: str, args: Sequence[tuple[str, ArgValue]], pairs: Sequence[EpisodePair]
) -> tuple[float | None, ...]:
    chosen = STATISTICS[statistic]
    return tuple(chosen.value(pair, dict(args)) for pair in pairs)


def _outcome(
    claims: ClaimsFile,
    job: _Job,
    variant: _Variant,
    episodes: Mapping[EpisodeKey, EpisodeResult],
    backend: str,
) -> Outcome:
    measure = job.measure
    pairs = _pairs(measure, variant.params, job.seeds, episodes, backend)
    values = _values(measure.statistic, measure.args, pairs)
    ours = estimate([value for value in values if value is not None])
    expectation = job.claim.expectation(claims.units[job.claim.unit])
    return Outcome(variant.name, variant.params, values, ours, judge(expectation, ours))


def _judge_claim(
    claims: ClaimsFile, job: _Job, episodes: Mapping[EpisodeKey, EpisodeResult], backend: str
) -> ClaimResult:
    outcomes = [_outcome(claims, job, variant, episodes, backend) for variant in job.variants]
    return ClaimResult(job.claim, job.measure, backend, job.seeds, outcomes[0], tuple(outcomes[1:]))


def _investigate(
    claims: ClaimsFile,
    investigation: Investigation,
    job: _Job,
    episodes: Mapping[EpisodeKey, EpisodeResult],
    backend: str,
) -> InvestigationResult:
    rows = []
    for variant in job.variants:
        pairs = _pairs(job.measure, variant.params, job.seeds, episodes, backend)
        rows.append(
            VariantRow(
                variant.name,
                variant.params,
                tuple(_diagnostic(diagnostic, pairs) for diagnostic in investigation.diagnostics),
                _outcome(claims, job, variant, episodes, backend),
            )
        )
    return InvestigationResult(investigation, job.claim, tuple(rows))


def _diagnostic(diagnostic: Diagnostic, pairs: Sequence[EpisodePair]) -> Estimate:
    values = _values(diagnostic.statistic, diagnostic.args, pairs)
    return estimate([value for value in values if value is not None])
