"""The statistics a claim is measured by: one number per episode, read off its record.

A claim of the papers is a number about a run: services in S at the end, a mean latency at
350 s, a makespan shorter than Docker's by 18%. Each is computed here from the
:class:`~dlsched.runs.evaluation.EpisodeResult` that :func:`dlsched.runs.evaluation.run_episode`
records, one value per seed, so that the mean and its confidence interval across seeds follow
(:func:`dlsched.runs.evaluation.estimate`).

Two kinds:

- **per-episode** statistics read one episode: every metric of
  :data:`dlsched.runs.evaluation.METRICS` under its own name, and those below that only the
  papers' figures need (a latency at a given time, the spread of the limits, a CPU share);
- **paired** statistics set an episode against the reference policy's episode of the same seed
  (the same jobs, arrivals and targets: the seed draws them): a relative reduction, a ratio, the
  share of jobs that finished sooner, the largest reduction of any one job.

A statistic is ``None`` for an episode in which it is undefined (a training job that did not
finish, no service measured at the time asked); the claim's estimate runs over the others and
says how many there were.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, QoEClass
from dlsched.runs.evaluation.metrics import METRICS
from dlsched.runs.evaluation.records import EpisodeResult, StepRecord

#: A statistic's argument: a number (seconds) or a name (a workload, another statistic).
ArgValue = float | str


@dataclass(frozen=True)
class EpisodePair:
    """What a statistic reads for one seed.

    Attributes:
        episode: the episode of the claim's policy.
        reference: the reference policy's episode of the same seed (paired statistics only).
    """

    episode: EpisodeResult
    reference: EpisodeResult | None = None


Compute = Callable[[EpisodePair, Mapping[str, ArgValue]], float | None]


@dataclass(frozen=True)
class Statistic:
    """A named measure of an episode (or of a pair of episodes).

    Attributes:
        name: how a claims file names it.
        description: one line for the report.
        kinds: the scenario kinds it applies to.
        paired: whether it needs the reference policy's episode of the same seed.
        params: the arguments it takes, each with its type (``float`` or ``str``).
        compute: the function of one seed's episodes and the arguments.
        lower_is_better: for a per-episode statistic, whether smaller values are better (what
            :func:`reduction` reduces).
    """

    name: str
    description: str
    kinds: tuple[JobKind, ...]
    paired: bool
    compute: Compute
    params: Mapping[str, type] = field(default_factory=dict)
    lower_is_better: bool = False

    def value(self, pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
        """This statistic of one seed's episodes."""
        return self.compute(pair, args)


_INFERENCE = (JobKind.INFERENCE,)
_TRAINING = (JobKind.TRAINING,)
_BOTH = (JobKind.INFERENCE, JobKind.TRAINING)
_ACTIVE = (JobState.RUNNING, JobState.MIGRATING)

#: Which per-job time a per-job statistic compares.
JOB_TIMES: tuple[str, ...] = ("completion", "first_tier")


# ---------------------------------------------------------------------------------- per episode


def _step_at(result: EpisodeResult, time_s: float) -> StepRecord | None:
    """The first step at or after ``time_s`` (``None`` if the episode ended before)."""
    return next((step for step in result.steps if step.time_s >= time_s - 1e-9), None)


def latency_mean_at(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Mean batch latency of the measured active services at the first step at or after
    ``time_s`` (DQoES V-B-1 reads 31.61 s at 350 s)."""
    step = _step_at(pair.episode, float(args["time_s"]))
    if step is None:
        return None
    latencies = [
        c.latency_s for c in step.containers if c.state in _ACTIVE and c.latency_s is not None
    ]
    return statistics.fmean(latencies) if latencies else None


def satisfied_at(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Services in S at the first step at or after ``time_s``."""
    step = _step_at(pair.episode, float(args["time_s"]))
    return None if step is None else float(step.satisfied)


def satisfied_gain_after(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Services in S at the end minus those at ``time_s`` (DQoES V-C-1: S grows once the
    arrivals are over)."""
    before = satisfied_at(pair, args)
    return None if before is None else pair.episode.steps[-1].satisfied - before


def limit_spread_final(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """The largest limit over the smallest among the active jobs of a worker at the end, the
    largest such ratio over the workers (1 is an even split: DQoES V-B-1, Fig. 3)."""
    by_worker: dict[int, list[float]] = {}
    for c in pair.episode.steps[-1].containers:
        if c.state in _ACTIVE and c.worker is not None:
            by_worker.setdefault(c.worker, []).append(c.limit)
    spreads = [max(limits) / min(limits) for limits in by_worker.values() if min(limits) > 0]
    return max(spreads) if spreads else None


def smallest_target_largest_limit(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """100 if, at the end, the active service with the smallest target holds the largest limit
    of its worker, else 0 (DQoES V-B-2, Fig. 7: the 5 s container gets the most CPU)."""
    active = [c for c in pair.episode.steps[-1].containers if c.state in _ACTIVE]
    targeted = [c for c in active if c.target_s is not None]
    if not targeted:
        return None
    smallest = min(targeted, key=lambda c: c.target_s or 0.0)
    rivals = [c.limit for c in active if c.worker == smallest.worker]
    return 100.0 if smallest.limit >= max(rivals) - 1e-9 else 0.0


def stuck_in_b_final(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Services in B at the end that were in G or S at some earlier step: they overshot into B
    and were not lifted back (a target they once met is within reach)."""
    met_once: set[str] = set()
    for step in pair.episode.steps:
        met_once.update(
            c.job_id for c in step.containers if c.qoe_class in (QoEClass.G, QoEClass.S)
        )
    last = pair.episode.steps[-1].containers
    return float(sum(1 for c in last if c.qoe_class is QoEClass.B and c.job_id in met_once))


def g_empty_final(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """100 if no active service is in G at the end, else 0."""
    return 100.0 if pair.episode.steps[-1].g == 0 else 0.0


def limit_rounds(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Steps at which some active job's limit changed: how often the policy acted."""
    rounds = 0
    previous: dict[str, float] = {}
    for step in pair.episode.steps:
        limits = {c.job_id: c.limit for c in step.containers if c.state in _ACTIVE}
        if any(
            abs(limit - previous[job]) > 1e-9 for job, limit in limits.items() if job in previous
        ):
            rounds += 1
        previous = limits
    return float(rounds)


def cpu_share(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Percent of its worker's used CPU that the jobs of ``workload`` used, averaged over the
    steps that end in ``(from_s, to_s]`` (FlowCon 6.3, Fig. 3: VAE at about 25%)."""
    workload = str(args["workload"])
    start, end = float(args["from_s"]), float(args["to_s"])
    shares = []
    for step in pair.episode.steps:
        if not start < step.time_s <= end + 1e-9:
            continue
        own = [c for c in step.containers if c.workload == workload and c.state in _ACTIVE]
        if not own:
            continue
        workers = {c.worker for c in own}
        used = sum(c.cpu_usage for c in step.containers if c.worker in workers)
        if used > 0:
            shares.append(100.0 * sum(c.cpu_usage for c in own) / used)
    return statistics.fmean(shares) if shares else None


def job_times(result: EpisodeResult, which: str) -> dict[str, float | None]:
    """Per job id, its completion time or its time to its first loss tier (``None``: not
    reached; jobs without tiers are left out of ``first_tier``)."""
    if which == "completion":
        return {job.job_id: job.completion_s for job in result.jobs}
    arrivals = {job.job_id: job for job in result.jobs if job.loss_targets is not None}
    reached: dict[str, float | None] = dict.fromkeys(arrivals)
    for step in result.steps:
        for c in step.containers:
            job = arrivals.get(c.job_id)
            if job is None or reached[c.job_id] is not None or c.loss is None:
                continue
            assert job.loss_targets is not None
            if c.loss <= job.loss_targets[0]:
                reached[c.job_id] = step.time_s - job.arrival_s
    return reached


def mean_time_to_first_tier_s(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Mean seconds from arrival to the first loss tier over the jobs with tiers (TRADL's time
    to target); undefined if one of them never reached it."""
    times = list(job_times(pair.episode, "first_tier").values())
    if not times or any(t is None for t in times):
        return None
    return statistics.fmean(t for t in times if t is not None)


# ---------------------------------------------------------------------------------- paired


def _pair(pair: EpisodePair, args: Mapping[str, ArgValue]) -> tuple[float, float] | None:
    """The per-episode statistic ``of`` for the episode and its reference."""
    assert pair.reference is not None
    inner = STATISTICS[str(args["of"])]
    ours = inner.value(EpisodePair(pair.episode), {})
    theirs = inner.value(EpisodePair(pair.reference), {})
    return None if ours is None or theirs is None else (ours, theirs)


def reduction(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Percent by which the policy lowers statistic ``of`` below the reference's:
    ``100 (reference - ours) / reference`` (FlowCon 6.4: mean completion -18.9%)."""
    values = _pair(pair, args)
    if values is None or values[1] == 0:
        return None
    ours, theirs = values
    return 100.0 * (theirs - ours) / theirs


def ratio(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """The policy's statistic ``of`` over the reference's (DQoES V-C-2: 26 against 3, "8x");
    undefined where the reference's is 0."""
    values = _pair(pair, args)
    if values is None or values[1] == 0:
        return None
    return values[0] / values[1]


def _job_pairs(pair: EpisodePair, which: str) -> list[tuple[float | None, float | None]]:
    assert pair.reference is not None
    ours, theirs = job_times(pair.episode, which), job_times(pair.reference, which)
    return [
        (ours[job], theirs[job])
        for job in ours
        if job in theirs and not (ours[job] is None and theirs[job] is None)
    ]


def jobs_faster_percent(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """Percent of the jobs whose time (``times``: completion, or first tier) is shorter than
    under the reference, job by job (FlowCon 6.3: 9 of 10); a job that finished under one
    policy only counts for that one."""
    pairs = _job_pairs(pair, str(args["times"]))
    if not pairs:
        return None
    faster = sum(
        1 for ours, theirs in pairs if ours is not None and (theirs is None or ours < theirs)
    )
    return 100.0 * faster / len(pairs)


def best_job_reduction(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
    """The largest percent by which one job's time (``times``) is shorter than under the
    reference (SpeCon: "up to 41.5%" for one job; TRADL: "up to 48.2%")."""
    reductions = [
        100.0 * (theirs - ours) / theirs
        for ours, theirs in _job_pairs(pair, str(args["times"]))
        if ours is not None and theirs is not None and theirs > 0
    ]
    return max(reductions) if reductions else None


# ---------------------------------------------------------------------------------- registry


def _metric(name: str) -> Compute:
    def compute(pair: EpisodePair, args: Mapping[str, ArgValue]) -> float | None:
        value = getattr(pair.episode.metrics, name)
        return None if value is None else float(value)

    return compute


_CUSTOM: tuple[Statistic, ...] = (
    Statistic(
        "latency_mean_at",
        "mean batch latency (s) of the measured services at time_s",
        _INFERENCE,
        False,
        latency_mean_at,
        {"time_s": float},
    ),
    Statistic(
        "satisfied_at",
        "services in S at time_s",
        _INFERENCE,
        False,
        satisfied_at,
        {"time_s": float},
    ),
    Statistic(
        "satisfied_gain_after",
        "services in S at the end minus those at time_s",
        _INFERENCE,
        False,
        satisfied_gain_after,
        {"time_s": float},
    ),
    Statistic(
        "limit_spread_final",
        "largest over smallest limit of a worker's active jobs at the end (1: even split)",
        _BOTH,
        False,
        limit_spread_final,
    ),
    Statistic(
        "smallest_target_largest_limit",
        "100 if the service with the smallest target holds its worker's largest limit at the end",
        _INFERENCE,
        False,
        smallest_target_largest_limit,
    ),
    Statistic(
        "stuck_in_b_final",
        "services in B at the end that were in G or S before (overshot and not lifted back)",
        _INFERENCE,
        False,
        stuck_in_b_final,
    ),
    Statistic(
        "g_empty_final", "100 if no service is in G at the end", _INFERENCE, False, g_empty_final
    ),
    Statistic("limit_rounds", "steps at which some limit changed", _BOTH, False, limit_rounds),
    Statistic(
        "cpu_share",
        "percent of its worker's used CPU that the jobs of workload used over (from_s, to_s]",
        _BOTH,
        False,
        cpu_share,
        {"workload": str, "from_s": float, "to_s": float},
    ),
    Statistic(
        "mean_time_to_first_tier_s",
        "mean seconds from arrival to the first loss tier (jobs with tiers)",
        _TRAINING,
        False,
        mean_time_to_first_tier_s,
        lower_is_better=True,
    ),
    Statistic(
        "reduction",
        "percent by which statistic `of` is lower than the reference's, seed by seed",
        _BOTH,
        True,
        reduction,
        {"of": str},
    ),
    Statistic(
        "ratio",
        "statistic `of` over the reference's, seed by seed",
        _BOTH,
        True,
        ratio,
        {"of": str},
    ),
    Statistic(
        "jobs_faster_percent",
        "percent of jobs whose time (completion or first_tier) beats the reference's",
        _TRAINING,
        True,
        jobs_faster_percent,
        {"times": str},
    ),
    Statistic(
        "best_job_reduction",
        "largest percent by which one job's time (completion or first_tier) beats the reference's",
        _TRAINING,
        True,
        best_job_reduction,
        {"times": str},
    ),
)

#: Every statistic by name: the evaluation metrics first, then the papers' own measures.
STATISTICS: Mapping[str, Statistic] = {
    **{
        spec.name: Statistic(
            spec.name,
            spec.description,
            spec.kinds,
            False,
            _metric(spec.name),
            lower_is_better=not spec.higher_is_better,
        )
        for spec in METRICS
    },
    **{statistic.name: statistic for statistic in _CUSTOM},
}


def check_args(statistic: Statistic, args: Mapping[str, object]) -> list[str]:
    """What is wrong with ``args`` for ``statistic``, one message per problem (empty: fine)."""
    problems = []
    for name in args:
        if name not in statistic.params:
            known = ", ".join(statistic.params) or "none"
            problems.append(f"argument {name!r} is unknown to {statistic.name} (it takes {known})")
    for name, kind in statistic.params.items():
        if name not in args:
            problems.append(f"{statistic.name} needs argument {name!r}")
            continue
        value = args[name]
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            problems.append(f"argument {name}={value!r} must be a number")
        elif kind is float and not math.isfinite(float(value)):  # type: ignore[arg-type]
            problems.append(f"argument {name}={value!r} must be finite")
        elif kind is str and not isinstance(value, str):
            problems.append(f"argument {name}={value!r} must be a name")
    of = args.get("of")
    if "of" in statistic.params and isinstance(of, str):
        inner = STATISTICS.get(of)
        if inner is None or inner.paired or inner.params:
            plain = sorted(n for n, s in STATISTICS.items() if not s.paired and not s.params)
            problems.append(
                f"argument of={of!r} must name a per-episode statistic without arguments: "
                f"{', '.join(plain)}"
            )
    times = args.get("times")
    if "times" in statistic.params and isinstance(times, str) and times not in JOB_TIMES:
        problems.append(f"argument times={times!r} must be one of {', '.join(JOB_TIMES)}")
    return problems


def values(
    statistic: Statistic, args: Mapping[str, ArgValue], pairs: Sequence[EpisodePair]
) -> list[float | None]:
    """``statistic`` of every seed's episodes, in the order given."""
    return [statistic.value(pair, args) for pair in pairs]
