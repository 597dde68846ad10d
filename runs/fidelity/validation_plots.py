"""Plots of a validation: each job on replay against its twin on the host; each policy over time;
each job's outcomes over the reruns as distributions; each job's pace, per second on the host.

One figure per episode (policy and seed), one panel per job: its batch latency against its target
(inference) or its loss (training) as the telemetry reported it, replay and host in two colours,
so that a reader sees where the model runs ahead of the host or behind it. Drawn on matplotlib's
Agg canvas, as :mod:`dlsched.runs.tracking.plots` draws the episode plots.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.validation_report import ValidationReport

#: Dots per inch of the saved figures.
DPI = 110
_COLOURS = {"replay": "tab:blue", "host": "tab:orange"}


def _panels(count: int, columns: int, width: float, height: float) -> tuple[Figure, list[Axes]]:
    """A figure of ``count`` panels, at most ``columns`` a row, each ``width`` x ``height``."""
    columns = min(columns, max(1, count))
    rows = max(1, math.ceil(count / columns))
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, list(figure.subplots(rows, columns, squeeze=False).flatten())


def _finish(figure: Figure, axes: list[Axes], used: int, title: str, path: Path) -> Path:
    """Hide the panels beyond ``used``, give the first the legend, title and save the figure."""
    for ax in axes[used:]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=DPI)
    return path


def plot_twins(replay: EpisodeResult, host: EpisodeResult, path: Path) -> Path:
    """Draw every job of one episode on both backends into ``path`` (a PNG); return it."""
    inference = replay.scenario.kind is JobKind.INFERENCE
    field = "latency_s" if inference else "loss"
    jobs = [job.job_id for job in replay.jobs]
    figure, axes = _panels(len(jobs), 4, 3.6, 2.6)
    targets = {job.job_id: job.target_s for job in replay.steps[-1].containers}
    workloads = {job.job_id: job.workload for job in replay.jobs}
    for ax, job_id in zip(axes, jobs, strict=False):
        for label, result in (("replay", replay), ("host", host)):
            times, values = _series(result, job_id, field)
            ax.plot(times, values, color=_COLOURS[label], label=label, linewidth=1.2)
        target = targets.get(job_id)
        if inference and target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="target")
        ax.set_title(f"{job_id} ({workloads[job_id]})", fontsize=9)
        ax.set_xlabel("time (s)", fontsize=8)
        ax.set_ylabel("batch latency (s)" if inference else "loss", fontsize=8)
        ax.tick_params(labelsize=7)
    title = f"{replay.scenario.name}: {replay.policy.name}, seed {replay.seed}: replay against host"
    return _finish(figure, axes, len(jobs), title, path)


def _series(result: EpisodeResult, job_id: str, field: str) -> tuple[list[float], list[float]]:
    times: list[float] = []
    values: list[float] = []
    for step in result.steps:
        for sample in step.containers:
            value = getattr(sample, field)
            if sample.job_id == job_id and value is not None and sample.state is JobState.RUNNING:
                times.append(step.time_s)
                values.append(float(value))
    return times, values


def plot_timelines(report: ValidationReport, path: Path) -> Path:
    """Each policy's satisfied fraction (or jobs finished) over time on both sides, into ``path``.

    One panel per policy, the two sides in the colours of :func:`plot_twins`, the mean gap in
    the panel's title: the papers' main figure, drawn for replay and for the host side by side.
    """
    panels = report.timelines
    figure, axes = _panels(len(panels), 3, 4.2, 3.0)
    model, reference = report.sides
    for ax, timeline in zip(axes, panels, strict=False):
        ax.plot(timeline.times_s, timeline.replay, color=_COLOURS["replay"], label=model)
        ax.plot(timeline.times_s, timeline.host, color=_COLOURS["host"], label=reference)
        gap = timeline.mean_gap
        ax.set_title(
            f"{timeline.policy}" + ("" if gap is None else f" (mean gap {gap:.2f})"), fontsize=9
        )
        ax.set_xlabel("time (s)", fontsize=8)
        ax.set_ylabel(
            "satisfied fraction" if timeline.measure == "satisfied_fraction" else "jobs finished",
            fontsize=8,
        )
        if timeline.measure == "satisfied_fraction":
            ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
    title = (
        f"{report.scenario}: {model} against {reference} over time (mean over seeds "
        f"{', '.join(str(seed) for seed in report.seeds)})"
    )
    return _finish(figure, axes, len(panels), title, path)


#: Panels of :func:`plot_distributions` at most (a policy's jobs, policy after policy).
MAX_DISTRIBUTION_PANELS = 24


def plot_distributions(report: ValidationReport, path: Path) -> Path | None:
    """Each job's outcomes over the reruns, replay's as a histogram with its 10-90% band
    shaded and the host's as ticks along the axis, into ``path``; ``None`` without
    distributions (a scenario whose seeds draw other jobs, or one host seed)."""
    summary = report.distributions
    if summary is None or not summary.jobs:
        return None
    jobs = summary.jobs[:MAX_DISTRIBUTION_PANELS]
    figure, axes = _panels(len(jobs), 4, 3.4, 2.5)
    model, reference = report.sides
    unit = "completion (s)" if report.kind is JobKind.TRAINING else "median latency (s)"
    for ax, job in zip(axes, jobs, strict=False):
        outcomes = job.outcomes
        low, high = outcomes.band
        ax.axvspan(low, high, color=_COLOURS["replay"], alpha=0.12, linewidth=0)
        ax.hist(outcomes.replay, bins=20, color=_COLOURS["replay"], alpha=0.7, label=model)
        top = ax.get_ylim()[1]
        ax.vlines(
            outcomes.host, 0, 0.35 * top, color=_COLOURS["host"], linewidth=2, label=reference
        )
        ax.set_title(
            f"{job.policy}: {job.job_id} ({job.workload}), W1 {outcomes.relative_w1:.0%}",
            fontsize=8,
        )
        ax.set_xlabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
    shown = "" if len(jobs) == len(summary.jobs) else f" (first {len(jobs)} of {len(summary.jobs)})"
    title = (
        f"{report.scenario}: each job's outcomes over the reruns{shown}; replay's 10-90% band "
        f"shaded,\nit covers {summary.coverage:.0%} of the host's outcomes"
    )
    return _finish(figure, axes, len(jobs), title, path)


def plot_paces(replay: EpisodeResult, host: EpisodeResult, path: Path) -> Path | None:
    """Every job's pace over the episode, the host's per second from its workload's own events
    (:mod:`dlsched.envs.progress_trace`) and replay's per step, into ``path``; ``None`` where the
    host episode kept no events (a replay reference, or a recording from before they were kept).
    """
    if not host.progress_traces:
        return None
    inference = replay.scenario.kind is JobKind.INFERENCE
    traces = {trace.job_id: trace for trace in host.progress_traces}
    jobs = [job.job_id for job in replay.jobs if job.job_id in traces]
    figure, axes = _panels(len(jobs), 4, 3.6, 2.4)
    horizon = max(replay.steps[-1].time_s, host.steps[-1].time_s)
    for ax, job_id in zip(axes, jobs, strict=False):
        host_rate = traces[job_id].per_second(horizon)
        ax.plot(np.arange(len(host_rate)) + 0.5, host_rate, color=_COLOURS["host"],
                linewidth=0.8, label="host, per second")  # fmt: skip
        times, rates = _replay_paces(replay, job_id, inference)
        ax.step(times, rates, where="pre", color=_COLOURS["replay"], linewidth=1.2,
                label="replay, per step")  # fmt: skip
        ax.set_title(job_id, fontsize=9)
        ax.set_xlabel("time (s)", fontsize=8)
        ax.set_ylabel("batches / s" if inference else "iterations / s", fontsize=8)
        ax.tick_params(labelsize=7)
    title = f"{replay.scenario.name}: {replay.policy.name}, seed {replay.seed}: each job's pace"
    return _finish(figure, axes, len(jobs), title, path)


def _replay_paces(
    result: EpisodeResult, job_id: str, inference: bool
) -> tuple[list[float], list[float]]:
    """A job's units per second over each step on replay: its iterations done in the step over
    the step's length, or (a service, which answers batch after batch) one over its latency."""
    times: list[float] = []
    rates: list[float] = []
    before, then = 0, 0.0
    for step in result.steps:
        sample = next((s for s in step.containers if s.job_id == job_id), None)
        if sample is not None and step.time_s > then:
            if inference:
                rate = 1.0 / sample.latency_s if sample.latency_s else 0.0
            else:
                rate = (sample.iterations - before) / (step.time_s - then)
                before = sample.iterations
            times.append(step.time_s)
            rates.append(rate)
        then = step.time_s
    return times, rates
