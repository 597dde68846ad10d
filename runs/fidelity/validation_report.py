"""``dlsched validate``'s report: what a validation found, as a table and as JSON data.

:func:`build_report` pairs the model's episodes with the reference's by policy and seed and
gathers the statistics of :mod:`~dlsched.runs.fidelity.validation_statistics` into a
:class:`ValidationReport`: every job compared, every policy's primary metric on both sides, the
errors over all jobs and over the policies *held out* of calibration apart (CausalSim's
discipline: calibrate on some policies, validate on others), the agreement of the two rankings,
each policy over time, the host's own spread where every seed draws the same jobs, and where
each workload's errors come from, and each job's mean throttle ratio on both sides.
:func:`render_report` prints it, :func:`report_data` is its
JSON form (``--json``, ``validation.json``).
"""

from __future__ import annotations

import dataclasses
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC, metrics_for
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.distribution_statistics import DistributionSummary
from dlsched.runs.fidelity.speed_interval import SpeedNoise
from dlsched.runs.fidelity.throttle_validation import ThrottleSummary, compare_throttling
from dlsched.runs.fidelity.validation_statistics import (
    ErrorSummary,
    JobComparison,
    PolicyComparison,
    SeedAgreement,
    Timeline,
    WorkloadAttribution,
    attribution,
    compare_episodes,
    compare_policies,
    distributions,
    ranking_agreement,
    same_jobs_every_seed,
    seed_agreement,
    timelines,
)
from dlsched.runs.tables import Column, aligned, legend


@dataclass(frozen=True)
class ValidationReport:
    """What ``dlsched validate`` found.

    Attributes:
        scenario: the scenario's name.
        kind: its kind.
        seeds: the seeds every policy ran on both backends.
        jobs: every job of every episode, compared.
        policies: every policy's primary metric on both backends.
        all_jobs: the errors over every job.
        held_out_jobs: the errors over the held-out policies' jobs (``None`` if none is).
        kendall_tau: Kendall's tau between the policies' order on the two backends (``None``
            with fewer than two policies or an undefined metric).
        same_ranking: whether the two backends order the policies the same.
        timelines: per policy, its satisfied fraction or jobs finished over time.
        sides: the labels of the model's side and the reference's (``replay``, ``docker``).
        warnings: what makes the comparison less trustworthy (another host than the
            profiles', a busy host, ...).
        seed_agreement: where every seed draws the same jobs, how their reruns agree
            (``None`` otherwise, or with one seed).
        attribution: per workload, whether its errors come from the CPU its jobs got or from
            the progress a CPU-second bought them.
        distributions: where every seed draws the same jobs, each job's outcomes over the
            seeds as distributions on both sides, against the host's own spread (``None``
            otherwise, or with one seed).
        speed_noise: where replay was rescaled to the host's speed, the errors beside the
            verdict: unscaled, and over the probe's interval (``None``: no rescale).
        throttling: each job's mean throttle ratio on both sides, and the absolute errors
            (:mod:`~dlsched.runs.fidelity.throttle_validation`; ``None``: neither side
            measured one).
    """

    scenario: str
    kind: JobKind
    seeds: tuple[int, ...]
    jobs: tuple[JobComparison, ...]
    policies: tuple[PolicyComparison, ...]
    all_jobs: ErrorSummary
    held_out_jobs: ErrorSummary | None
    kendall_tau: float | None
    same_ranking: bool | None
    timelines: tuple[Timeline, ...] = ()
    sides: tuple[str, str] = ("replay", "docker")
    warnings: tuple[str, ...] = ()
    seed_agreement: SeedAgreement | None = None
    attribution: tuple[WorkloadAttribution, ...] = ()
    distributions: DistributionSummary | None = None
    speed_noise: SpeedNoise | None = None
    throttling: ThrottleSummary | None = None


def build_report(
    scenario: Scenario,
    replay: Sequence[EpisodeResult],
    host: Sequence[EpisodeResult],
    held_out: Sequence[str] = (),
    warnings: Sequence[str] = (),
    sides: tuple[str, str] = ("replay", "docker"),
    replay_spread: Sequence[EpisodeResult] = (),
    speed_noise: SpeedNoise | None = None,
) -> ValidationReport:
    """The report of a validation from its episodes on both backends (paired by policy and seed).

    ``replay_spread``: replay's episodes of more seeds than the host ran, which join replay's
    side of the distributions (a scenario that draws the same jobs every seed).
    ``speed_noise``: the verdict held through the host speed probe's interval.

    Raises:
        ValueError: an episode on one backend has no twin on the other.
    """
    jobs = compare_episodes(replay, host, held_out)
    policies = compare_policies(replay, host, held_out)
    spec = next(s for s in metrics_for(scenario.kind) if s.name == PRIMARY_METRIC[scenario.kind])
    tau, same = ranking_agreement(policies, spec.higher_is_better)
    held = [job for job in jobs if job.held_out]
    reruns = same_jobs_every_seed(scenario)
    return ValidationReport(
        scenario=scenario.name,
        kind=scenario.kind,
        seeds=tuple(dict.fromkeys(result.seed for result in replay)),
        jobs=jobs,
        policies=policies,
        all_jobs=ErrorSummary.of(jobs),
        held_out_jobs=ErrorSummary.of(held) if held else None,
        kendall_tau=tau,
        same_ranking=same,
        timelines=timelines(replay, host),
        sides=sides,
        warnings=tuple(warnings),
        seed_agreement=seed_agreement(jobs) if reruns else None,
        attribution=attribution(jobs),
        distributions=distributions([*replay, *replay_spread], host) if reruns else None,
        speed_noise=speed_noise,
        throttling=compare_throttling(replay, host),
    )


def render_report(report: ValidationReport) -> str:
    """The report as plain text: the table per policy and its legend, then the summary, then
    the warnings."""
    model, reference = report.sides
    seeds = ", ".join(str(seed) for seed in report.seeds)
    gaps = {timeline.policy: timeline.mean_gap for timeline in report.timelines}
    rows = []
    for policy in report.policies:
        jobs = [job for job in report.jobs if job.policy == policy.policy]
        summary = ErrorSummary.of(jobs)
        rows.append(
            [
                policy.policy + (" (held out)" if policy.held_out else ""),
                str(summary.jobs),
                _percent(summary.median),
                _percent(summary.max),
                _number(policy.replay),
                _number(policy.host),
                _percent(policy.relative_error, signed=True),
                _number(gaps.get(policy.policy)),
            ]
        )
    columns = _policy_columns(report)
    lines = [
        f"{report.scenario}: {model} against {reference}, seeds {seeds}; per job, "
        f"{_job_measure(report.kind)}; error = ({model} - {reference}) / {reference}",
        aligned(columns, rows, indent="  "),
        textwrap.indent(legend(columns), "  "),
    ]
    lines.append(
        f"all jobs: median |error| {_percent(report.all_jobs.median)}, max "
        f"{_percent(report.all_jobs.max)} over {report.all_jobs.jobs} jobs; replay / host "
        f"median {_number(report.all_jobs.median_ratio)}"
        + (
            f" ({report.all_jobs.missing} finished on one backend only)"
            if report.all_jobs.missing
            else ""
        )
    )
    if report.speed_noise is not None:
        lines.extend(_speed_noise_lines(report.speed_noise))
    if report.held_out_jobs is not None:
        lines.append(
            f"held-out policies' jobs: median |error| {_percent(report.held_out_jobs.median)}, "
            f"max {_percent(report.held_out_jobs.max)} over {report.held_out_jobs.jobs} jobs"
        )
    if report.seed_agreement is not None:
        lines.extend(_seed_agreement_lines(report.seed_agreement))
    if report.distributions is not None:
        lines.extend(_distribution_lines(report.distributions))
    if report.kind is JobKind.INFERENCE:
        distances = [
            job.latency_distance_s for job in report.jobs if job.latency_distance_s is not None
        ]
        if distances:
            lines.append(
                f"latency distributions: median Wasserstein-1 distance "
                f"{statistics.median(distances):.2f} s per job"
            )
    if report.throttling is not None:
        lines.append(_throttling_line(report.throttling))
    if report.kendall_tau is not None:
        replay_order = _order(report, "replay")
        host_order = _order(report, "host")
        verdict = "the same order" if report.same_ranking else "DIFFERENT orders"
        lines.append(
            f"ranking: Kendall tau {report.kendall_tau:+.2f}, {verdict}: replay "
            f"{' > '.join(replay_order)}; host {' > '.join(host_order)}"
        )
    elif report.same_ranking is not None:
        # Kendall's tau is undefined when a backend gives every policy the same value.
        sides = [
            f"{side} ties every policy at {getattr(report.policies[0], side):.3g}"
            if len({getattr(p, side) for p in report.policies}) == 1
            else f"{side} {' > '.join(_order(report, side))}"
            for side in ("replay", "host")
        ]
        lines.append(f"ranking: undefined: {'; '.join(sides)}")
    if report.attribution:
        lines.append(
            "where it comes from, per workload (median over its jobs of replay / host): the "
            "cores its jobs used, and the progress a core-second bought them"
        )
        lines.extend(
            f"  {item.workload:18} {item.jobs:4d} jobs   cores x{item.cores_ratio:.2f}   "
            f"progress per core-second x{item.progress_ratio:.2f}"
            for item in report.attribution
        )
    lines.extend(f"warning: {warning}" for warning in report.warnings)
    return "\n".join(lines)


def _throttling_line(summary: ThrottleSummary) -> str:
    """The mean throttle ratios' errors in one line."""
    if summary.median_error is None or summary.max_error is None:
        return (
            f"throttle ratio: measured on one side only ({summary.missing} jobs); no error per job"
        )
    return (
        f"throttle ratio: median |error| of the mean per job {summary.median_error:.3f}, max "
        f"{summary.max_error:.3f} over {summary.jobs} jobs (absolute, a fraction of periods)"
        + (f"; {summary.missing} measured on one side only" if summary.missing else "")
    )


def _job_measure(kind: JobKind) -> str:
    """What is compared of each job."""
    return "completion time" if kind is JobKind.TRAINING else "median batch latency"


def _policy_columns(report: ValidationReport) -> list[Column]:
    """The columns of the table per policy, each with what it holds."""
    model, reference = report.sides
    metric = report.policies[0].metric if report.policies else "primary metric"
    inference = report.kind is JobKind.INFERENCE
    over_time = "satisfied fraction" if inference else "jobs finished"
    return [
        Column(
            "policy",
            "the policy; (held out): one the profiles were not calibrated with, whose errors "
            "test the model where it was not fitted",
            left=True,
        ),
        Column("jobs", "its jobs compared, over every seed"),
        Column(
            "median |err|",
            f"the median over its jobs of |error| of each job's {_job_measure(report.kind)}",
        ),
        Column("max |err|", "the largest of those |error|s"),
        Column("replay", f"the policy's {metric} on {model}, mean over the seeds"),
        Column("host", f"the policy's {metric} on {reference}, mean over the seeds"),
        Column("err", f"({model} - {reference}) / {reference} of those two means"),
        Column(
            ("satisfied" if inference else "finished") + " gap",
            f"mean |{model} - {reference}| of the {over_time} over the steps",
        ),
    ]


def _speed_noise_lines(noise: SpeedNoise) -> list[str]:
    """The report's lines on the verdict held through the host speed probe's interval."""
    ratios = ", ".join(workload.describe() for workload in noise.workloads)
    head = (
        f"host speed: replay rescaled by {ratios}; median |error| "
        f"{_percent(noise.rescaled)} rescaled, {_percent(noise.unscaled)} unscaled (the "
        "profiles as they are)"
    )
    span = noise.error_range()
    if span is None:
        return [
            f"{head}; the probe holds no interval (a host-speed.json of format 1): "
            "--host-speed measure probes with one"
        ]
    lines = [
        f"{head}, {_percent(span[0])}-{_percent(span[1])} over the probe's interval (every "
        f"workload at its low end: {_percent(noise.at_low)}, at its high end: "
        f"{_percent(noise.at_high)})"
    ]
    if noise.within_noise():
        lines.append(
            f"the verdict is within the probe's noise: its interval moves the median |error| "
            f"over {(span[1] - span[0]) * 100:.1f} points, more than the error itself "
            f"({_percent(noise.rescaled)}); probe longer (below) or validate on a steadier host"
        )
    lengths = "; ".join(workload.length() for workload in noise.workloads)
    lines.append(f"probe length for an interval narrower than the rescale it corrects: {lengths}")
    return lines


def speed_noise_figures(noise: SpeedNoise | None) -> dict[str, float | None]:
    """The MLflow metrics of the verdict held through the probe's interval."""
    if noise is None:
        return {}
    span = noise.error_range()
    within = noise.within_noise()
    figures: dict[str, float | None] = {
        "validate/unscaled_median_abs_error": noise.unscaled,
        "validate/speed_noise/min_median_abs_error": None if span is None else span[0],
        "validate/speed_noise/max_median_abs_error": None if span is None else span[1],
        "validate/speed_noise/within": None if within is None else float(within),
    }
    for workload in noise.workloads:
        interval = workload.interval
        figures[f"validate/{workload.workload}/speed_ratio"] = workload.ratio
        if interval is not None:
            figures[f"validate/{workload.workload}/speed_ratio_low"] = interval.low
            figures[f"validate/{workload.workload}/speed_ratio_high"] = interval.high
            figures[f"validate/{workload.workload}/probe_s_needed"] = interval.needed_s(
                workload.ratio
            )
    return figures


def _seed_agreement_lines(agreement: SeedAgreement) -> list[str]:
    """The report's lines on the host's reruns, where every seed draws the same jobs."""
    lines = [
        f"the same jobs on every seed: a host job is {_percent(agreement.host_spread)} from "
        f"its mean over the {agreement.seeds} seeds (median; replay "
        f"{_percent(agreement.replay_spread)}); each job's mean over the seeds against the "
        f"host's: median |error| {_percent(agreement.mean_jobs.median)}, max "
        f"{_percent(agreement.mean_jobs.max)} over {agreement.mean_jobs.jobs} jobs"
    ]
    pairs, floor = agreement.host_against_host, agreement.best_prediction
    if pairs.jobs:
        lines.append(
            f"the host against itself (each rerun of a job against every other, as replay is "
            f"held against the host): median |error| {_percent(pairs.median)}, max "
            f"{_percent(pairs.max)} over {pairs.jobs} pairs; so the best one prediction per "
            f"job can do against all its reruns is median |error| {_percent(floor.median)}, "
            f"max {_percent(floor.max)}: the floor under replay's errors above"
        )
    return lines


def _distribution_lines(summary: DistributionSummary) -> list[str]:
    """The report's lines on the outcomes as distributions over the reruns."""
    ratio = summary.w1_over_floor
    lines = [
        f"as distributions over the reruns: per job, replay's Wasserstein-1 distance to the host "
        f"{_percent(summary.median_w1)} of the host's mean (median over "
        f"{len(summary.jobs)} jobs), the host's own split-half floor "
        f"{_percent(summary.median_floor)}"
        + (f" ({ratio:.2f}x the floor)" if ratio is not None else "")
        + f"; replay's 10-90% band covers {_percent(summary.coverage)} of the host's outcomes"
    ]
    ranking = summary.ranking
    if ranking is not None:
        if not ranking.separated:
            verdict = "the host's 95% intervals separate no two policies"
        elif ranking.agrees:
            verdict = f"replay orders all {len(ranking.separated)} pair(s) the host separates alike"
        else:
            pairs = ", ".join(f"{a} / {b}" for a, b in ranking.disagreements)
            verdict = (
                f"replay orders {pairs} otherwise than the host, whose intervals separate them"
            )
        lines.append(f"ranking against the host's spread: {verdict}")
    return lines


def _order(report: ValidationReport, side: str) -> list[str]:
    spec = next(s for s in metrics_for(report.kind) if s.name == PRIMARY_METRIC[report.kind])
    sign = -1.0 if spec.higher_is_better else 1.0
    ranked = sorted(report.policies, key=lambda p: sign * float(getattr(p, side)))
    return [p.policy for p in ranked]


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def report_data(report: ValidationReport) -> dict[str, object]:
    """The report as JSON data (what ``--json`` prints and ``validation.json`` holds)."""
    return {
        "scenario": report.scenario,
        "kind": report.kind.value,
        "seeds": list(report.seeds),
        "all_jobs": dataclasses.asdict(report.all_jobs),
        "held_out_jobs": (
            dataclasses.asdict(report.held_out_jobs) if report.held_out_jobs is not None else None
        ),
        "kendall_tau": report.kendall_tau,
        "same_ranking": report.same_ranking,
        "sides": list(report.sides),
        "timelines": [dataclasses.asdict(t) | {"mean_gap": t.mean_gap} for t in report.timelines],
        "policies": [
            dataclasses.asdict(p) | {"relative_error": p.relative_error} for p in report.policies
        ],
        "jobs": [dataclasses.asdict(j) | {"relative_error": j.relative_error} for j in report.jobs],
        "warnings": list(report.warnings),
        "seed_agreement": (
            dataclasses.asdict(report.seed_agreement) if report.seed_agreement is not None else None
        ),
        "attribution": [dataclasses.asdict(item) for item in report.attribution],
        "distributions": _distribution_data(report.distributions),
        "speed_noise": _speed_noise_data(report.speed_noise),
        "throttling": (
            dataclasses.asdict(report.throttling) if report.throttling is not None else None
        ),
    }


def _speed_noise_data(noise: SpeedNoise | None) -> dict[str, object] | None:
    if noise is None:
        return None
    span = noise.error_range()
    return {
        "rescaled": noise.rescaled,
        "unscaled": noise.unscaled,
        "at_low": noise.at_low,
        "at_high": noise.at_high,
        "error_range": None if span is None else list(span),
        "within_noise": noise.within_noise(),
        "workloads": [
            {
                "workload": workload.workload,
                "ratio": workload.ratio,
                "interval": None
                if workload.interval is None
                else dataclasses.asdict(workload.interval)
                | {"probe_s_needed": workload.interval.needed_s(workload.ratio)},
            }
            for workload in noise.workloads
        ],
    }


def _distribution_data(summary: DistributionSummary | None) -> dict[str, object] | None:
    if summary is None:
        return None
    return {
        "median_w1": summary.median_w1,
        "median_floor": summary.median_floor,
        "w1_over_floor": summary.w1_over_floor,
        "coverage": summary.coverage,
        "ranking": None
        if summary.ranking is None
        else {
            "host": {p: dataclasses.asdict(i) for p, i in summary.ranking.host.items()},
            "replay": {p: dataclasses.asdict(i) for p, i in summary.ranking.replay.items()},
            "separated": [list(pair) for pair in summary.ranking.separated],
            "disagreements": [list(pair) for pair in summary.ranking.disagreements],
        },
        "jobs": [
            {
                "policy": job.policy,
                "job_id": job.job_id,
                "workload": job.workload,
                "replay": list(job.outcomes.replay),
                "host": list(job.outcomes.host),
                "relative_w1": job.outcomes.relative_w1,
                "ks": job.outcomes.ks,
                "coverage": job.outcomes.coverage,
                "floor": job.outcomes.floor(),
            }
            for job in summary.jobs
        ],
    }
