"""The papers' figures, redrawn from the runs of a reproduction.

Per scenario that the claims ran:

- inference: the number of services in S over time, one line per policy and reading (mean over
  the seeds), with the papers' final counts marked (DQoES journal, Figs. 4 inset, 6, 8, 10, 12-13);
- training: every job's completion time next to the reference's (Docker) in the first seed
  (FlowCon journal, Figs. 5, 8, 13-16), drawn by
  :func:`dlsched.runs.tracking.plots.plot_completion`;
- both: CPU limits and usage over time of each claim's policy in the first seed (DQoES Figs. 3,
  5, 7, 9; FlowCon Figs. 3-4, 11-12), drawn by :func:`dlsched.runs.tracking.plots.plot_limits`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.reproduce.runner import EpisodeKey, Reproduction
from dlsched.runs.tracking.plots import DPI, plot_completion, plot_limits


@dataclass(frozen=True)
class DrawnFigure:
    """One figure of the report.

    Attributes:
        scenario: the scenario it shows.
        caption: what it shows and which paper figure it redraws.
        path: the PNG file, relative to the report's folder.
    """

    scenario: str
    caption: str
    path: Path


#: Subfolder of the report's folder that holds the figures.
FIGURES_DIR = "figures"

#: Paper figures each scenario's plots redraw, for the captions.
PAPER_FIGURES: dict[str, str] = {
    "dqoes-resnet50-burst-target20": "DQoES Figs. 2-3",
    "dqoes-resnet50-burst-target40": "DQoES Figs. 4-5",
    "dqoes-varied-burst": "DQoES Figs. 6-7",
    "dqoes-varied-fixed50": "DQoES Figs. 8-9",
    "dqoes-random-models": "DQoES Figs. 10-11",
    "dqoes-cluster-40": "DQoES Figs. 12-15",
    "flowcon-poc-3": "FlowCon Figs. 3-4",
    "flowcon-10-random": "FlowCon Fig. 5",
    "flowcon-15-random": "FlowCon Fig. 8",
    "flowcon-cluster-20": "FlowCon Figs. 11-13",
    "flowcon-cluster-40": "FlowCon Fig. 14",
    "flowcon-cluster-60-homogeneous": "FlowCon Fig. 15",
    "flowcon-cluster-60-heterogeneous": "FlowCon Fig. 16",
}


def draw_figures(reproduction: Reproduction, folder: Path) -> list[DrawnFigure]:
    """Draw every figure of ``reproduction`` into ``folder``/figures; their paths are relative
    to ``folder``."""
    target = folder / FIGURES_DIR
    target.mkdir(parents=True, exist_ok=True)
    drawn: list[DrawnFigure] = []
    for scenario in dict.fromkeys(result.measure.scenario for result in reproduction.results):
        results = [r for r in reproduction.results if r.measure.scenario == scenario]
        keys = [key for key in reproduction.episodes if key.scenario == scenario]
        first_seed = min(key.seed for key in keys)
        episodes = reproduction.episodes
        loaded = episodes[keys[0]].scenario
        kind, name = loaded.kind, loaded.name  # ``scenario`` may be a file's path
        paper = PAPER_FIGURES.get(name)
        redraws = f" (redraws {paper})" if paper else ""
        if kind is JobKind.INFERENCE:
            path = target / f"{name}-satisfied.png"
            marks = [
                (r.measure.policy, value)
                for r in results
                if r.measure.statistic == "satisfied_final" and (value := r.claim.value) is not None
            ]
            _plot_satisfied(reproduction, name, keys, marks, path)
            drawn.append(
                DrawnFigure(
                    name,
                    f"{name}: services in S over time, mean over the seeds, per policy and "
                    f"reading; dashed: the paper's final count{redraws}",
                    path.relative_to(folder),
                )
            )
        backend = results[0].backend
        for policy, reference, options in dict.fromkeys(
            (r.measure.policy, r.measure.reference, r.measure.backend_options) for r in results
        ):
            own = episodes[EpisodeKey(scenario, policy, (), first_seed, backend, options)]
            if kind is JobKind.TRAINING and reference is not None:
                theirs = episodes[EpisodeKey(scenario, reference, (), first_seed, backend, options)]
                path = target / f"{name}-{policy}-completion.png"
                plot_completion(own, theirs, path)
                drawn.append(
                    DrawnFigure(
                        name,
                        f"{name}: completion time of every job, {policy} against "
                        f"{reference}, seed {first_seed}{redraws}",
                        path.relative_to(folder),
                    )
                )
            path = target / f"{name}-{policy}-limits.png"
            if not any(figure.path == path.relative_to(folder) for figure in drawn):
                plot_limits(own, path)
                drawn.append(
                    DrawnFigure(
                        name,
                        f"{name}: CPU limit and usage of every container under {policy}, "
                        f"seed {first_seed}{redraws}",
                        path.relative_to(folder),
                    )
                )
    return drawn


def _plot_satisfied(
    reproduction: Reproduction,
    scenario: str,
    keys: Sequence[EpisodeKey],
    marks: Sequence[tuple[str, float]],
    path: Path,
) -> None:
    figure = Figure(figsize=(8, 4), layout="constrained")
    ax = figure.subplots()
    groups: dict[str, list[EpisodeResult]] = {}
    for key in keys:
        label = reproduction.labels.get((key.policy, key.params), key.policy)
        groups.setdefault(label, []).append(reproduction.episodes[key])
    for label, episodes in groups.items():
        length = min(len(episode.steps) for episode in episodes)
        times = [step.time_s for step in episodes[0].steps[:length]]
        means = [
            statistics.fmean(episode.steps[index].satisfied for episode in episodes)
            for index in range(length)
        ]
        style = "-" if "[" not in label else ":"
        ax.plot(times, means, style, linewidth=1.4, label=f"{label} ({len(episodes)} seeds)")
    for policy, value in marks:
        ax.axhline(value, color="black", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"paper, {policy}: {value:g}",
            (1, value),
            xycoords=("axes fraction", "data"),
            xytext=(-4, 3),
            textcoords="offset points",
            ha="right",
            fontsize=7,
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("services in S")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"{scenario}: services in S over time", fontsize=10)
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=DPI)
