"""Plots of a validation: each job on replay against its twin on the host; each policy over time.

One figure per episode (policy and seed), one panel per job: its batch latency against its target
(inference) or its loss (training) as the telemetry reported it, replay and host in two colours,
so that a reader sees where the model runs ahead of the host or behind it. Drawn on matplotlib's
Agg canvas, as :mod:`dlsched.runs.tracking.plots` draws the episode plots.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.validation_report import ValidationReport

#: Dots per inch of the saved figures.
DPI = 110
_COLOURS = {"replay": "tab:blue", "host": "tab:orange"}


def plot_twins(replay: EpisodeResult, host: EpisodeResult, path: Path) -> Path:
    """Draw every job of one episode on both backends into ``path`` (a PNG); return it."""
    inference = replay.scenario.kind is JobKind.INFERENCE
    field = "latency_s" if inference else "loss"
    jobs = [job.job_id for job in replay.jobs]
    columns = min(4, max(1, len(jobs)))
    rows = math.ceil(len(jobs) / columns)
    figure = Figure(figsize=(3.6 * columns, 2.6 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
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
    for ax in axes[len(jobs) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    figure.suptitle(
        f"{replay.scenario.name}: {replay.policy.name}, seed {replay.seed}: replay against host",
        fontsize=10,
    )
    figure.savefig(path, dpi=DPI)
    return path


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
    columns = min(3, max(1, len(panels)))
    rows = math.ceil(len(panels) / columns) if panels else 1
    figure = Figure(figsize=(4.2 * columns, 3.0 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
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
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    figure.suptitle(
        f"{report.scenario}: {model} against {reference} over time (mean over seeds "
        f"{', '.join(str(seed) for seed in report.seeds)})",
        fontsize=10,
    )
    figure.savefig(path, dpi=DPI)
    return path
