"""Growth efficiency measured from telemetry: FlowCon's Eq. 1-2 (journal, Section 4).

A training job's progress score over a span is ``P = |E(t_i) - E(t_{i-1})| / (t_i - t_{i-1})``
(Eq. 1), with ``E`` its evaluation function (the loss it reports), and its growth efficiency is
``G = P / R`` (Eq. 2), with ``R`` its mean CPU usage over the span. The journal does not say in
which unit ``R`` is measured. In cores (what ``docker stats`` reports, 100% per core) a job alone
on its worker falls below Alg. 3's threshold of half its own progress once it keeps more than two
cores busy, which is how the VAE of Section 6.3 ends up capped when MNIST arrives; as a fraction of
the worker (the authors' 2018 code) ``G >= P`` always and a lone job never leaves NL.
:class:`GrowthMeter` measures in either unit, cores by default. The 2018 code also divided each
loss by the job's running maximum before differencing, so that jobs whose losses have different
scales compare; the meter does so optionally. The span runs from the last time the scheduler
measured the job (or from its first reported loss) to now, so a scheduler that backs off measures
over its own interval.

:class:`GrowthRounds` is the clock and the meter of a scheduler that runs a round every
``interval_s`` on the growth measured since its last one (SpeCon, TRADL).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from dlsched.baselines.base import Baseline, round_due
from dlsched.envs.decision import Decision
from dlsched.envs.telemetry import JobTelemetry, Telemetry

USAGE_UNITS = ("cores", "fraction")


@dataclass(frozen=True)
class GrowthSample:
    """What one job did over one span.

    Attributes:
        span_s: the span's length (seconds).
        P: the progress score of Eq. 1, per second, on the (optionally normalised) loss.
        R: mean CPU usage over the span, in cores or as a fraction of the worker's cores.
        loss_drop_per_s: how fast the raw loss fell (negative if it rose).
        iterations_per_s: iterations completed per second.
    """

    span_s: float
    P: float
    R: float
    loss_drop_per_s: float
    iterations_per_s: float

    @property
    def G(self) -> float | None:
        """Eq. 2's growth efficiency ``P / R``; ``None`` if the job used no CPU (paused)."""
        return self.P / self.R if self.R > 0 else None


@dataclass(frozen=True)
class _Anchor:
    time_s: float
    loss: float
    cpu_seconds: float
    iterations: int


class GrowthMeter:
    """Measures each job's :class:`GrowthSample` between the moments a scheduler picks.

    Args:
        normalise_loss: divide losses by the job's running maximum before differencing (the
            authors' 2018 code); ``False`` differences raw losses.
        usage_unit: ``"cores"`` or ``"fraction"`` (of the worker's cores): the unit of ``R``.
    """

    def __init__(self, normalise_loss: bool = True, usage_unit: str = "cores") -> None:
        self.normalise_loss = normalise_loss
        self.usage_unit = usage_unit
        self._anchors: dict[str, _Anchor] = {}
        self._max_loss: dict[str, float] = {}

    def reset(self) -> None:
        """Forget every job (a new episode)."""
        self._anchors = {}
        self._max_loss = {}

    def observe(self, telemetry: Telemetry) -> None:
        """Track running maxima, and start measuring jobs that reported their first loss."""
        for job in telemetry.jobs:
            if not job.active:
                self._anchors.pop(job.job_id, None)
                continue
            if job.loss is None:
                continue
            self._max_loss[job.job_id] = max(self._max_loss.get(job.job_id, job.loss), job.loss)
            if job.job_id not in self._anchors:
                self._anchors[job.job_id] = _anchor(job, telemetry.time_s)

    def take(self, job: JobTelemetry, now_s: float, cores: float) -> GrowthSample | None:
        """The sample of ``job`` since it was last taken, and start the next span at ``now_s``.

        Args:
            job: the job's telemetry now.
            now_s: the time of that telemetry.
            cores: the cores of the job's worker (for ``usage_unit="fraction"``).

        Returns:
            ``None`` when the job has no loss yet or the span is empty.
        """
        anchor = self._anchors.get(job.job_id)
        if anchor is None or job.loss is None or now_s <= anchor.time_s:
            return None
        self._anchors[job.job_id] = _anchor(job, now_s)
        span = now_s - anchor.time_s
        scale = self._max_loss.get(job.job_id, 0.0) if self.normalise_loss else 1.0
        scale = scale if scale > 0 else 1.0
        return GrowthSample(
            span_s=span,
            P=abs(job.loss / scale - anchor.loss / scale) / span,
            R=(job.cpu_seconds - anchor.cpu_seconds)
            / span
            / (cores if self.usage_unit == "fraction" else 1.0),
            loss_drop_per_s=(anchor.loss - job.loss) / span,
            iterations_per_s=(job.iterations - anchor.iterations) / span,
        )


def _anchor(job: JobTelemetry, now_s: float) -> _Anchor:
    assert job.loss is not None
    return _Anchor(now_s, job.loss, job.cpu_seconds, job.iterations)


class GrowthRounds(Baseline):
    """A scheduler that measures every job's growth at each telemetry (its ``_meter``, which the
    subclass makes) and runs :meth:`run_round` every ``interval_s`` seconds, its first round at its
    first telemetry; between rounds it decides nothing, so the limits in force hold.

    Subclasses set ``interval_s`` (a parameter of theirs) and ``_meter`` in their constructor.
    """

    interval_s: float
    _meter: GrowthMeter
    _last_run_s: float | None = None

    def reset(self) -> None:
        self._meter.reset()
        self._last_run_s = None

    def act(self, telemetry: Telemetry) -> Decision:
        self._meter.observe(telemetry)
        if not round_due(self._last_run_s, telemetry.time_s, self.interval_s):
            return Decision()
        self._last_run_s = telemetry.time_s
        return self.run_round(telemetry)

    @abstractmethod
    def run_round(self, telemetry: Telemetry) -> Decision:
        """One round at ``telemetry``: take each job's growth sample from ``_meter`` and
        decide."""
