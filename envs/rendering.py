"""What ``env.render()`` shows: a text table of the jobs, or the episode's panels as an image.

- ``human``: the ``ansi`` table written to the terminal (standard output) at every ``reset`` and
  ``step``, as Gymnasium's human mode renders by itself; no window, so nothing more is needed
  (``rl_zoo3.enjoy`` and ``gym.make(..., render_mode="human")`` work without pygame).
- ``ansi``: one table per call, the time and, per job that has arrived, its worker and slot, its
  state, its limit and CPU usage (in cores), and for a service its last batch latency against its
  target with its DQoES set (G, S, B; journal Section IV-A), for a training job its loss and
  iterations done of its total. A header counts the satisfied services.
- ``rgb_array``: the panels a reader of the DQoES and FlowCon papers looks at (their Figures of
  latency and limits over time), drawn for the episode so far: latency over target per service
  (or loss per training job) above, limit per job below.

Matplotlib is imported on the first ``rgb_array`` frame only, so an environment that is not
rendered never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobTelemetry, QoEClass, Telemetry

if TYPE_CHECKING:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

#: The render modes both environments support.
RENDER_MODES: tuple[str, ...] = ("human", "ansi", "rgb_array")
#: Frames per second of a replayed episode: one step (the papers' 10 s interval) every 0.25 s.
RENDER_FPS = 4
#: Size of an ``rgb_array`` frame in pixels (height, width).
FRAME_SHAPE: tuple[int, int] = (480, 720)
_DPI = 80


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _job_line(job: JobTelemetry, cores: float) -> str:
    place = "-" if job.worker is None else f"w{job.worker}/s{job.slot}"
    common = (
        f"{job.job_id:<5} {job.workload:<14.14} {place:<7} {job.state.value:<9} "
        f"{job.limit:>5.2f} {job.cpu_usage:>5.2f}/{job.limit * cores:<5.2f}"
    )
    if job.kind is JobKind.INFERENCE:
        qoe = job.qoe_class.value if job.qoe_class is not None else "-"
        return (
            f"{common} {_fmt(job.latency_s, '6.1f'):>7} / {_fmt(job.target_s, '<6.1f'):<6} {qoe:>3}"
        )
    progress = f"{job.iterations}/{job.total_iterations or '?'}"
    return f"{common} {_fmt(job.loss, '8.4f'):>8} {progress:>11}"


def render_ansi(telemetry: Telemetry | None, kind: JobKind) -> str:
    """The text table of one snapshot (``None``: before the first reset)."""
    if telemetry is None:
        return "(no episode yet: call reset())\n"
    cores = {worker.index: worker.cores for worker in telemetry.workers}
    active = telemetry.active_jobs
    if kind is JobKind.INFERENCE:
        satisfied = telemetry.count(QoEClass.S)
        header = f"t={telemetry.time_s:7.1f} s  satisfied {satisfied}/{len(active)} active"
        columns = "latency / target   set"
    else:
        done = sum(1 for job in telemetry.jobs if job.completed_s is not None)
        header = f"t={telemetry.time_s:7.1f} s  {len(active)} active, {done} finished"
        columns = "    loss  iterations"
    lines = [
        header,
        f"{'job':<5} {'workload':<14} {'where':<7} {'state':<9} limit usage/cores {columns}",
    ]
    lines += [
        _job_line(job, cores.get(job.worker, 0.0) if job.worker is not None else 0.0)
        for job in telemetry.jobs
    ]
    return "\n".join(lines) + "\n"


class FrameRenderer:
    """Draws ``rgb_array`` frames on one reused figure (a new figure per frame leaks memory)."""

    def __init__(self) -> None:
        self._canvas: FigureCanvasAgg | None = None

    def frame(self, history: Sequence[Telemetry], kind: JobKind) -> np.ndarray:
        """The panels of ``history`` (the episode's snapshots so far) as ``uint8 (H, W, 3)``."""
        canvas = self._canvas or self._new_canvas()
        self._canvas = canvas
        figure = canvas.figure
        figure.clear()
        top, bottom = figure.subplots(2, 1, sharex=True)
        series: dict[str, tuple[list[float], list[float], list[float]]] = {}
        for snapshot in history:
            for job in snapshot.jobs:
                if not job.active:
                    continue
                if kind is JobKind.INFERENCE:
                    value = (
                        job.latency_s / job.target_s
                        if job.latency_s is not None and job.target_s
                        else np.nan
                    )
                else:
                    value = job.loss if job.loss is not None else np.nan
                times, values, limits = series.setdefault(job.job_id, ([], [], []))
                times.append(snapshot.time_s)
                values.append(value)
                limits.append(job.limit)
        for job_id, (times, values, limits) in series.items():
            (line,) = top.plot(times, values, label=job_id, linewidth=1.2)
            bottom.plot(times, limits, color=line.get_color(), linewidth=1.2)
        if kind is JobKind.INFERENCE:
            top.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
            top.set_ylabel("latency / target")
        else:
            top.set_ylabel("loss")
        bottom.set_ylabel("limit (fraction of worker)")
        bottom.set_xlabel("time (s)")
        bottom.set_ylim(0.0, 1.05)
        if history:
            top.set_title(f"t = {history[-1].time_s:.0f} s", fontsize=10)
        if 0 < len(series) <= 12:
            top.legend(fontsize=7, ncol=4, loc="upper left")
        canvas.draw()
        rgba = np.asarray(canvas.buffer_rgba())
        return np.array(rgba[:, :, :3], dtype=np.uint8)

    @staticmethod
    def _new_canvas() -> FigureCanvasAgg:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        height, width = FRAME_SHAPE
        figure = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI, layout="constrained")
        return FigureCanvasAgg(figure)

    def close(self) -> None:
        """Drop the figure."""
        self._canvas = None
