"""Plots of an episode and of a comparison, drawn with matplotlib's Agg canvas (no display).

Episode plots are those a reader of the papers expects: the batch latency of every inference
container against its target and tolerance band (DQoES journal, "delivered QoE", Figs. 2, 5, 7,
8), the CPU limit and usage of every container over time (DQoES Figs. 3, 4, 6, 9; FlowCon journal
Figs. 11-12), and the completion time of every training job against that of ``default`` in the
same seed (FlowCon Figs. 5, 8, 13-16, which set FlowCon against Docker Swarm's default).

Figures are built on :class:`matplotlib.figure.Figure` directly rather than through ``pyplot``,
so no global backend is switched and nothing stays open between plots. matplotlib is imported
by the first plot (:func:`_figure`), not with this module: a command that draws nothing
(``--no-plots``, ``--no-tracking``) does not wait for it (about 0.5 s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.evaluation.summaries import PolicySummary

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TIMELINE_FILE = "timeline.png"
LATENCY_FILE = "latency.png"
LIMITS_FILE = "limits.png"
COMPLETION_FILE = "completion.png"

#: Dots per inch of saved figures: sharp in MLflow's artifact viewer and on a laptop screen
#: (80 blurred the 7-point panel titles), still small enough to log for every episode.
DPI = 120
#: Containers beyond this many are drawn without a legend entry.
LEGEND_LIMIT = 12


def plot_episode(
    result: EpisodeResult, reference: EpisodeResult | None, folder: Path
) -> list[Path]:
    """Draw every plot of an episode into ``folder`` and return their paths.

    Args:
        result: the episode.
        reference: ``default``'s episode of the same seed, for the completion-time plot.
        folder: where the PNG files go.
    """
    paths = [plot_limits(result, folder / LIMITS_FILE)]
    if result.scenario.kind is JobKind.INFERENCE:
        paths.append(plot_latency(result, folder / LATENCY_FILE))
    else:
        paths.append(plot_completion(result, reference, folder / COMPLETION_FILE))
    return paths


def _series(result: EpisodeResult, field: str) -> dict[str, tuple[list[float], list[float]]]:
    """Per job, the times and values of one :class:`ContainerSample` field while it is active."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for step in result.steps:
        for sample in step.containers:
            value = getattr(sample, field)
            if value is None or sample.state not in _SHOWN:
                continue
            times, values = series.setdefault(sample.job_id, ([], []))
            times.append(step.time_s)
            values.append(float(value))
    return series


_SHOWN = (JobState.RUNNING, JobState.MIGRATING)


def _title(result: EpisodeResult) -> str:
    return f"{result.scenario.name}: {result.policy.name}, seed {result.seed}"


def plot_latency(result: EpisodeResult, path: Path) -> Path:
    """One panel per inference container: its batch latency, its target and the tolerance band.

    Panels share their axes, so latencies compare at a glance and only the outer panels carry
    tick labels (which also keeps drawing 40 panels cheap).
    """
    latency = _series(result, "latency_s")
    targets = {
        sample.job_id: (sample.target_s, sample.tolerance, sample.workload)
        for step in result.steps
        for sample in step.containers
        if sample.target_s is not None
    }
    jobs = sorted(targets)
    columns = min(5, max(len(jobs), 1))
    rows = max(math.ceil(len(jobs) / columns), 1)
    height = 1.5 * rows + 0.9
    figure = _figure(figsize=(2.2 * columns + 0.6, height))
    figure.subplots_adjust(  # margins in inches, whatever the number of rows
        left=0.6 / (2.2 * columns + 0.6),
        right=0.98,
        bottom=0.5 / height,
        top=1 - 0.45 / height,
        wspace=0.08,
        hspace=0.35,
    )
    axes = figure.subplots(rows, columns, sharex=True, sharey=True, squeeze=False)
    for index, job_id in enumerate(jobs):
        ax: Axes = axes[index // columns][index % columns]
        target, tolerance, workload = targets[job_id]
        ax.axhspan((1 - tolerance) * target, (1 + tolerance) * target, color="tab:green", alpha=0.2)
        ax.axhline(target, color="tab:green", linewidth=1)
        ax.plot(*latency.get(job_id, ([], [])), color="tab:blue", linewidth=1.2)
        ax.set_title(f"{job_id} {workload}: target {target:.3g} s", fontsize=7, pad=2)
        ax.tick_params(labelsize=7)
        ax.label_outer()
    for index in range(len(jobs), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    from matplotlib.ticker import MaxNLocator

    axes[0][0].xaxis.set_major_locator(MaxNLocator(4))
    axes[0][0].yaxis.set_major_locator(MaxNLocator(4))
    figure.supxlabel("time (s)", fontsize=8)
    figure.supylabel("batch latency (s)", fontsize=8)
    figure.suptitle(_title(result) + " (band: target ± tolerance)", fontsize=9)
    return _save(figure, path)


def plot_limits(result: EpisodeResult, path: Path) -> Path:
    """CPU limit (top) and usage (bottom) of every container over time, in cores."""
    # fixed margins: the constrained layout solver cost a third of this plot's time
    figure = _figure(figsize=(9, 6))
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.93, hspace=0.06)
    limit_ax, usage_ax = figure.subplots(2, 1, sharex=True)
    limits = _series(result, "limit_cores")
    usage = _series(result, "cpu_usage")
    for job_id in sorted(limits):
        label = job_id if len(limits) <= LEGEND_LIMIT else None
        (line,) = limit_ax.step(*limits[job_id], where="post", linewidth=1, label=label)
        usage_ax.plot(*usage.get(job_id, ([], [])), linewidth=1, color=line.get_color())
    cores = result.scenario.cluster_cores
    limit_ax.set_ylabel("CPU limit (cores)")
    limit_ax.set_ylim(0, max(worker.cores for worker in result.scenario.workers) * 1.05)
    usage_ax.set_ylabel("CPU usage (cores)")
    usage_ax.set_xlabel("time (s)")
    if limits and len(limits) <= LEGEND_LIMIT:
        limit_ax.legend(fontsize=7, ncol=min(len(limits), 6), loc="upper right")
    figure.suptitle(f"{_title(result)} ({cores:g} cores in all)", fontsize=10)
    return _save(figure, path)


def plot_completion(result: EpisodeResult, reference: EpisodeResult | None, path: Path) -> Path:
    """Completion time of every training job, next to ``default``'s in the same seed.

    A job that did not finish has no bar; without a reference only this policy's bars are drawn.
    """
    jobs = sorted(result.jobs, key=lambda job: job.job_id)
    reference_jobs = {job.job_id: job for job in reference.jobs} if reference else {}
    figure = _figure(figsize=(max(6.0, 0.45 * len(jobs) + 2), 4), layout="constrained")
    ax = figure.subplots()
    width = 0.4 if reference else 0.8
    positions = range(len(jobs))
    own = [job.completion_s or 0.0 for job in jobs]
    ax.bar(
        [p - (width / 2 if reference else 0) for p in positions],
        own,
        width,
        label=result.policy.name,
    )
    if reference is not None:
        theirs = [
            (reference_jobs[job.job_id].completion_s or 0.0) if job.job_id in reference_jobs else 0
            for job in jobs
        ]
        ax.bar([p + width / 2 for p in positions], theirs, width, label=reference.policy.name)
    ax.set_xticks(list(positions), [job.job_id for job in jobs], rotation=90, fontsize=7)
    ax.set_ylabel("completion time (s)")
    ax.legend(fontsize=8)
    suffix = "" if reference else " (no default episode of this seed to compare with)"
    ax.set_title(_title(result) + suffix, fontsize=10)
    return _save(figure, path)


#: Seeds of a policy drawn as thin lines on the timeline, at most: its mean is over every seed.
DRAWN_SEEDS = 50


@dataclass
class PolicyTimeline:
    """A policy's headline over time across its episodes, gathered as they end in memory that
    does not grow with their number: the first :data:`DRAWN_SEEDS` episodes' lines, and the mean
    over all of them step by step (up to the shortest episode's end).

    Attributes:
        drawn: the first episodes' ``(times, values)``.
        times: the times of the steps the mean covers.
        sums: per step, the sum of the values of every episode.
        episodes: how many episodes were added.
    """

    drawn: list[tuple[list[float], list[float]]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    sums: list[float] = field(default_factory=list)
    episodes: int = 0

    def add(self, result: EpisodeResult) -> None:
        """Add an episode's headline: satisfied services (inference) or finished jobs."""
        inference = result.scenario.kind is JobKind.INFERENCE
        times = [step.time_s for step in result.steps]
        values = [
            float(step.satisfied if inference else step.finished_jobs) for step in result.steps
        ]
        if len(self.drawn) < DRAWN_SEEDS:
            self.drawn.append((times, values))
        if not self.episodes:
            self.times, self.sums = times, list(values)
        else:
            steps = min(len(self.sums), len(values))
            self.times = self.times[:steps]
            self.sums = [
                total + value
                for total, value in zip(self.sums[:steps], values[:steps], strict=True)
            ]
        self.episodes += 1

    def mean(self) -> list[float]:
        """The mean over the episodes at each of :attr:`times`."""
        return [total / self.episodes for total in self.sums]


def plot_timeline(
    kind: JobKind,
    timelines: Mapping[str, PolicyTimeline],
    title: str,
    path: Path,
) -> Path:
    """Satisfied services (inference) or finished jobs (training) over time, one line per policy.

    This is the papers' main figure (DQoES journal Figs. 2, 5, 7: satisfied models over time;
    FlowCon Fig. 13: jobs completed over time), for the policies of one evaluation side by side.

    Args:
        kind: the scenario's kind.
        timelines: per policy, its episodes' timelines.
        title: the figure's title.
        path: where the PNG goes.
    """
    from matplotlib.ticker import MaxNLocator

    # fixed margins (inches: 0.75 left, 0.55 below, 0.4 above for the title): the constrained
    # layout solver cost more than the rest of the figure, and one axes needs none
    figure = _figure(figsize=(8, 4.5))
    figure.subplots_adjust(left=0.75 / 8, right=0.98, bottom=0.55 / 4.5, top=1 - 0.4 / 4.5)
    ax = figure.subplots()
    for policy, timeline in timelines.items():
        # each seed thin, the mean over seeds (step by step) bold in the same colour
        colour = None
        for times, values in timeline.drawn:
            (line,) = ax.plot(times, values, linewidth=0.6, alpha=0.35, color=colour)
            colour = line.get_color()
        ax.plot(timeline.times, timeline.mean(), linewidth=2, color=colour, label=policy)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("satisfied services" if kind is JobKind.INFERENCE else "jobs finished")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    seeds = max((timeline.episodes for timeline in timelines.values()), default=0)
    drawn = max((len(timeline.drawn) for timeline in timelines.values()), default=0)
    thin = "each seed thin" if drawn == seeds else f"the first {drawn} thin"
    ax.set_title(f"{title}: mean of {seeds} seed(s) bold, {thin}", fontsize=10)
    return _save(figure, path)


@dataclass(frozen=True)
class ComparisonPanel:
    """One scenario of a comparison plot.

    Attributes:
        title: the scenario's label.
        metric: the metric drawn (a :class:`~dlsched.runs.evaluation.MetricSpec` name).
        summaries: one bar each, in this order.
        best: index in ``summaries`` of the best one, drawn highlighted; ``None`` for none.
    """

    title: str
    metric: str
    summaries: Sequence[PolicySummary]
    best: int | None


def plot_comparison(panels: Sequence[ComparisonPanel], path: Path) -> Path:
    """One bar chart per scenario: each policy's mean with its 95% confidence interval."""
    count = max(len(panels), 1)
    columns = min(count, 3)
    rows = math.ceil(count / columns)
    figure = _figure(figsize=(4.5 * columns, 3.6 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, panel in enumerate(panels):
        ax = axes[index // columns][index % columns]
        means, below, above, labels, colours = [], [], [], [], []
        for position, summary in enumerate(panel.summaries):
            estimate = summary.metric(panel.metric).estimate
            mean = estimate.mean or 0.0
            means.append(mean)
            # asymmetric where the interval was clipped to the metric's range
            below.append(mean - estimate.ci_low if estimate.ci_low is not None else 0.0)
            above.append(estimate.ci_high - mean if estimate.ci_high is not None else 0.0)
            labels.append(summary.label)
            colours.append("tab:orange" if position == panel.best else "tab:blue")
        ax.bar(range(len(means)), means, yerr=[below, above], color=colours, capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(panel.summaries[0].metric(panel.metric).spec.label if panel.summaries else "")
        ax.set_title(panel.title, fontsize=9)
    for index in range(len(panels), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    # two lines: one line is wider than a one-panel figure, and constrained layout clips it
    figure.suptitle(
        "mean across seeds, 95% CI (clipped to the metric's range);\nbest in orange", fontsize=10
    )
    return _save(figure, path)


def _figure(**options: Any) -> Figure:
    """A figure (``options`` as :class:`matplotlib.figure.Figure` takes them) on the Agg canvas,
    which renders to files with no display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(**options)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=DPI)
    return path
