"""Autothrottle: per-container Captains hold a CPU throttle target; a Tower picks the targets.

Source: Z. Wang, P. Li, C.-J. M. Liang, F. Wu, F. Y. Yan, "Autothrottle: A Practical Bi-Level
Approach to Resource Management for SLO-Targeted Microservices", NSDI 2024 (arXiv 2212.12180),
as ``docs/papers/autothrottle.md`` summarises it, and the authors' public code (repository
``microsoft/autothrottle``): the Captain is ``CaptainScaler`` in ``worker-daemon.py``, the Tower
``VwTower`` in ``utils.py``, the parameters the evaluation passes them in ``evaluation.py``. The
paper's text was not available to us; where the page cites a section, it says how far that goes.

**The Captain** (one per container) sets the container's CPU quota so that its *throttle ratio*
(the fraction of CFS periods in which it used its whole quota) stays near a target ``t``. Each
round, with the ratio ``r`` measured since the last round and the container's recent usage:

- *rollback*: if the last round scaled down and ``r > 3 t``, the scale-down is undone and
  mirrored (``limit = 2 * previous - limit``) and the margin grows by ``r - t``;
- otherwise the margin moves by ``r - t`` (never below 0), and
- *scale up*: if ``r > 3 t``, ``limit *= 1 + (r - 3 t)``;
- *scale down*: else, with ``u = max(usage) + margin * stdev(usage)`` over the usage window, if
  ``u <= 0.9 * limit`` the limit falls to ``max(0.5 * limit, u)``;
- the limit never falls below ``min_limit_cores``.

**The Tower** (per application) is a contextual bandit: every ``tower_interval_s`` it scores the
target it chose last (its cost: the allocation, normalised over the samples that met the SLO,
when the window met it; 2 plus the latency, normalised over the violating samples, when not),
aggregates the samples of each target by their median cost, picks the cheapest target for the
current context, and explores a neighbouring target with probability ``explore``.

Adaptations to dlsched (every one a parameter or stated here):

- **The Captain's clock.** The code samples every 100 ms (one CFS period) and decides every 1 s
  over the last 10 samples, keeping 50 usage samples (5 s); it checks for a rollback at every
  sample. dlsched measures once per interval (10 s by default), so the Captain decides once per
  interval from that interval's throttle ratio and mean usage, and keeps the last
  ``usage_window`` intervals (5, the code's five decisions' worth). Means over 10 s vary less than
  100-ms samples, so the margin's deviation term is smaller than on the host. A rollback is seen
  at the first measurement after the scale-down; that round's decision is the rollback (the code
  starts its throttling count afresh after one, and dlsched has no fresher count), and the usage
  window starts filled with zeros, as the code's does.
- **No throttle measurement.** ``throttle_ratio`` is ``None`` where no quota is in force (an
  uncapped container cannot be throttled) or where the backend does not measure it; the Captain
  reads both as 0. On a backend that does not measure it a capped container therefore never
  scales up: the Captain only trims towards its usage.
- **Units and bounds.** Limits and usage are in cores, as a CFS quota is; the code starts every
  container at its node's cores (uncapped), and dlsched's limit of 1 is the worker's cores, which
  the Captain never exceeds.
- **A new container.** The first round that sees a job records its CPU counter and leaves it
  uncapped, as the code's first sample does; its Captain starts at the next round.
- **The Tower's application.** Each dlsched inference job is a one-container application whose
  SLO is its satisfied band's upper edge ``(1 + tolerance) * target_s``, so the Tower's feedback
  is whether the job was satisfied or faster: minimising the allocation among windows that met
  the SLO drives it into the band, where dlsched's satisfied count reads it. One container means
  one group of components, so the actions are the targets themselves (the code pairs two groups'
  targets, 81 actions). The latency of a window is the slowest last-batch latency reported in it
  (the code's is the 99th percentile of its requests); a window in which no batch completed is
  kept open, interval by interval, until one does. The allocation is the mean limit in cores
  over the window.
- **The Tower's learner.** The code trains a small neural contextual bandit (Vowpal Wabbit) on
  the request rate; dlsched has no request rate and no such dependency, so the context is the
  number of active jobs on the job's worker (the contention it meets) and the learner is a table
  of median costs per context and target; a target not yet tried in a context is predicted at
  cost 0 (an untrained learner's prediction), so it gets tried. Ties go to the target nearest the
  last one, then to the lower target. Exploration draws from a generator seeded by ``seed`` at
  every reset, so an episode replays exactly.
- **Fixed targets.** ``tower="fixed"`` keeps every Captain at ``initial_target``, the target the
  evaluation starts Captains at before the Tower's first choice.

Episodes of dlsched's scenarios last minutes and the Tower's rounds a minute each, so it explores
for much of an episode; the evaluation code warms it up for hours before it is measured
(``docs/papers/autothrottle.md``).
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from dlsched.baselines.base import Baseline, round_due
from dlsched.baselines.parameters import check_choice, check_integer, check_number
from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry

TOWERS = ("bandit", "fixed")
#: The throttle targets the evaluation code offers its Tower.
TOWER_TARGETS = "0,0.02,0.04,0.06,0.1,0.15,0.2,0.25,0.3"


class CaptainRule(StrEnum):
    """Which rule a Captain round applied."""

    ROLLBACK = "rollback"
    SCALE_UP = "scale up"
    SCALE_DOWN = "scale down"
    HOLD = "hold"


@dataclass(frozen=True)
class CaptainSettings:
    """The Captain's constants (see :class:`Autothrottle` for each)."""

    scale_up_multiple: float = 3.0
    scale_down_trigger: float = 0.9
    max_scale_down: float = 0.5
    min_limit_cores: float = 0.01


@dataclass
class Captain:
    """One container's Captain: its limit, its last limit, its margin and its usage window.

    Attributes:
        limit: the quota it sets, in cores.
        previous_limit: the limit before its last round (what a rollback mirrors around).
        margin: how many usage deviations it keeps above the peak usage.
        usage: the container's mean usage (cores) over its last rounds, newest last.
        scaled_down: whether its last round scaled down.
    """

    limit: float
    previous_limit: float
    margin: float
    usage: deque[float]
    scaled_down: bool = False

    @classmethod
    def start(cls, limit: float, margin: float, usage_window: int) -> Captain:
        """A Captain at ``limit`` cores with its usage window filled with zeros."""
        return cls(limit, limit, margin, deque([0.0] * usage_window, maxlen=usage_window))

    def step(
        self, throttle_ratio: float, usage: float, target: float, settings: CaptainSettings
    ) -> CaptainRule:
        """One round from the throttle ratio and mean usage (cores) measured since the last.

        Returns:
            The rule applied; :attr:`limit` holds the new limit (cores, not bounded above).
        """
        self.usage.append(usage)
        excessive = throttle_ratio > settings.scale_up_multiple * target
        if self.scaled_down and excessive:
            self.limit, self.previous_limit = 2 * self.previous_limit - self.limit, self.limit
            self.margin += throttle_ratio - target
            self.scaled_down = False
            self.limit = max(self.limit, settings.min_limit_cores)
            return CaptainRule.ROLLBACK
        self.previous_limit = self.limit
        self.margin = max(0.0, self.margin + throttle_ratio - target)
        self.scaled_down = False
        rule = CaptainRule.HOLD
        if excessive:
            self.limit *= 1 + throttle_ratio - settings.scale_up_multiple * target
            rule = CaptainRule.SCALE_UP
        else:
            spread = statistics.stdev(self.usage) if len(self.usage) > 1 else 0.0
            wanted = max(self.usage) + spread * self.margin
            if wanted <= settings.scale_down_trigger * self.limit:
                self.limit = max(settings.max_scale_down * self.limit, wanted)
                self.scaled_down = True
                rule = CaptainRule.SCALE_DOWN
        self.limit = max(self.limit, settings.min_limit_cores)
        return rule


@dataclass(frozen=True)
class TowerSample:
    """One Tower window: the context, the target index chosen, and what came of it."""

    context: int
    action: int
    latency_s: float
    allocation: float


def sample_costs(samples: Sequence[TowerSample], slo_s: float) -> list[float]:
    """Each sample's cost as the Tower scores it: a window that met the SLO costs its allocation
    normalised over those that met it, in ``[0, 1]``; one that did not, 2 plus its latency
    normalised over those that did not, in ``[2, 3]``. A single value normalises to the middle."""
    met = [s.allocation for s in samples if s.latency_s <= slo_s]
    missed = [s.latency_s for s in samples if s.latency_s > slo_s]
    costs = []
    for s in samples:
        if s.latency_s <= slo_s:
            costs.append(_normalised(s.allocation, met))
        else:
            costs.append(2 + _normalised(s.latency_s, missed))
    return costs


def _normalised(value: float, among: Sequence[float]) -> float:
    low, high = min(among), max(among)
    return (value - low) / (high - low) if high > low else 0.5


def predicted_costs(
    samples: Sequence[TowerSample], slo_s: float, context: int, actions: int
) -> list[float]:
    """Each action's predicted cost in ``context``: the median cost of its samples there, 0 for
    an action without one."""
    by_action: dict[int, list[float]] = {}
    for sample, cost in zip(samples, sample_costs(samples, slo_s), strict=True):
        if sample.context == context:
            by_action.setdefault(sample.action, []).append(cost)
    return [statistics.median(by_action[a]) if a in by_action else 0.0 for a in range(actions)]


def greedy_action(costs: Sequence[float], last: int) -> int:
    """The cheapest action; ties to the one nearest ``last``, then to the lower one."""
    return min(range(len(costs)), key=lambda a: (costs[a], abs(a - last), a))


@dataclass
class Tower:
    """One application's Tower: its samples, its current target and its open window."""

    action: int
    samples: list[TowerSample] = field(default_factory=list)
    context: int = 0
    window_latency_s: float | None = None
    window_allocation: list[float] = field(default_factory=list)
    last_round_s: float | None = None

    def watch(self, job: JobTelemetry, limit_cores: float) -> None:
        """Add one interval of ``job`` to the open window."""
        if job.latency_s is not None:
            slowest = self.window_latency_s
            self.window_latency_s = (
                job.latency_s if slowest is None else max(slowest, job.latency_s)
            )
        self.window_allocation.append(limit_cores)

    def choose(
        self, context: int, slo_s: float, actions: int, explore: float, rng: np.random.Generator
    ) -> bool:
        """Close the window as a sample and choose the next action into :attr:`action`; whether
        it did (a window in which no batch completed stays open, and so does the choice)."""
        if self.window_latency_s is not None and self.window_allocation:
            self.samples.append(
                TowerSample(
                    self.context,
                    self.action,
                    self.window_latency_s,
                    float(np.mean(self.window_allocation)),
                )
            )
        elif self.last_round_s is not None:
            return False
        self.window_latency_s = None
        self.window_allocation = []
        self.context = context
        best = greedy_action(predicted_costs(self.samples, slo_s, context, actions), self.action)
        neighbours = [a for a in (best - 1, best + 1) if 0 <= a < actions]
        if neighbours and explore > 0 and rng.random() < explore:
            best = neighbours[int(rng.integers(len(neighbours)))]
        self.action = best
        return True


class Autothrottle(Baseline):
    """Autothrottle: Captains hold each service's CPU throttle ratio at a target a Tower picks.

    A Captain per inference container sets its quota to hold a throttle target; a Tower per job,
    a contextual bandit by default (``tower="bandit"``), picks that target against the job's
    latency target. See the module docstring for the rules and what dlsched adapts.

    Args:
        tower: ``"bandit"`` (the Tower learns the targets) or ``"fixed"`` (every Captain keeps
            ``initial_target``).
        initial_target: the throttle target of every Captain with ``tower="fixed"``, and the
            one the Tower's search starts nearest (the evaluation code starts Captains at 0).
        tower_targets: the targets the Tower chooses among, comma-separated, ascending (the
            evaluation code's nine, from 0 to 0.3).
        tower_interval_s: seconds between Tower rounds (the code's 60).
        explore: the probability that the Tower tries a target next to its choice (the
            code's 0.1 outside its evaluation).
        seed: the seed of the Tower's exploration, drawn afresh at every reset.
        initial_margin: the Captain's starting margin, in usage deviations (the code's 3).
        usage_window: how many intervals of usage the Captain's peak and deviation cover (the
            code's five decisions).
        scale_up_multiple: the Captain scales up when throttling exceeds this times its target
            (the code's 3).
        scale_down_trigger: the Captain scales down when peak usage plus margin is at most this
            fraction of its limit (the code's 0.9).
        max_scale_down: the lowest fraction of its limit one scale-down leaves (the code's 0.5).
        min_limit_cores: the lowest limit, in cores (the code's 0.01).
    """

    name = "autothrottle"
    kinds = (JobKind.INFERENCE,)

    def __init__(
        self,
        tower: str = "bandit",
        initial_target: float = 0.0,
        tower_targets: str = TOWER_TARGETS,
        tower_interval_s: float = 60.0,
        explore: float = 0.1,
        seed: int = 0,
        initial_margin: float = 3.0,
        usage_window: int = 5,
        scale_up_multiple: float = 3.0,
        scale_down_trigger: float = 0.9,
        max_scale_down: float = 0.5,
        min_limit_cores: float = 0.01,
    ) -> None:
        super().__init__()
        self.tower = check_choice(self.name, "tower", tower, TOWERS)
        self.initial_target = check_number(
            self.name, "initial_target", initial_target, low=0.0, high=1.0
        )
        self.tower_targets = tower_targets
        self._targets = _parse_targets(self.name, tower_targets)
        self.tower_interval_s = check_number(
            self.name, "tower_interval_s", tower_interval_s, low=0.0, low_open=True
        )
        self.explore = check_number(self.name, "explore", explore, low=0.0, high=1.0)
        self.seed = check_integer(self.name, "seed", seed, low=0)
        self.initial_margin = check_number(self.name, "initial_margin", initial_margin, low=0.0)
        self.usage_window = check_integer(self.name, "usage_window", usage_window, low=1)
        self.scale_up_multiple = check_number(
            self.name, "scale_up_multiple", scale_up_multiple, low=1.0
        )
        self.scale_down_trigger = check_number(
            self.name, "scale_down_trigger", scale_down_trigger, low=0.0, high=1.0, low_open=True
        )
        self.max_scale_down = check_number(
            self.name, "max_scale_down", max_scale_down, low=0.0, high=1.0, low_open=True
        )
        self.min_limit_cores = check_number(
            self.name, "min_limit_cores", min_limit_cores, low=0.0, low_open=True
        )
        self._settings = CaptainSettings(
            self.scale_up_multiple, self.scale_down_trigger, self.max_scale_down, min_limit_cores
        )
        self._captains: dict[str, Captain] = {}
        self._towers: dict[str, Tower] = {}
        self._counters: dict[str, tuple[float, float]] = {}
        self._rng = np.random.default_rng(self.seed)

    def reset(self) -> None:
        self._captains = {}
        self._towers = {}
        self._counters = {}
        self._rng = np.random.default_rng(self.seed)

    def act(self, telemetry: Telemetry) -> Decision:
        cores = {worker.index: worker.cores for worker in telemetry.workers}
        load = {
            worker.index: len(telemetry.on_worker(worker.index)) for worker in telemetry.workers
        }
        limits: dict[str, float] = {}
        for job in telemetry.active_jobs:
            if job.state is not JobState.RUNNING or job.worker is None:
                continue
            worker_cores = cores[job.worker]
            usage = self._usage_since_last_round(job, telemetry.time_s)
            if usage is None:
                continue
            target = self._target(job, telemetry.time_s, load[job.worker], worker_cores)
            captain = self._captains.get(job.job_id)
            if captain is None:
                captain = Captain.start(
                    job.limit * worker_cores, self.initial_margin, self.usage_window
                )
                self._captains[job.job_id] = captain
            ratio = 0.0 if job.throttle_ratio is None else job.throttle_ratio
            captain.step(ratio, usage, target, self._settings)
            captain.limit = min(captain.limit, worker_cores)
            limits[job.job_id] = captain.limit / worker_cores
        return Decision(limits=limits)

    def captain(self, job_id: str) -> Captain | None:
        """The Captain of ``job_id`` (``None`` before its first round)."""
        return self._captains.get(job_id)

    def target(self, job_id: str) -> float:
        """The throttle target the Captain of ``job_id`` holds now."""
        tower = self._towers.get(job_id)
        return self.initial_target if tower is None else self._targets[tower.action]

    def _target(self, job: JobTelemetry, now_s: float, load: int, worker_cores: float) -> float:
        """The throttle target for this round: the Tower's, after its round if one is due."""
        if self.tower == "fixed" or job.target_s is None:
            return self.initial_target
        tower = self._towers.get(job.job_id)
        if tower is None:
            nearest = min(
                range(len(self._targets)),
                key=lambda a: abs(self._targets[a] - self.initial_target),
            )
            tower = self._towers[job.job_id] = Tower(action=nearest)
        else:
            tower.watch(job, job.limit * worker_cores)
        if round_due(tower.last_round_s, now_s, self.tower_interval_s):
            slo_s = (1 + job.tolerance) * job.target_s
            if tower.choose(load, slo_s, len(self._targets), self.explore, self._rng):
                tower.last_round_s = now_s
        return self._targets[tower.action]

    def _usage_since_last_round(self, job: JobTelemetry, now_s: float) -> float | None:
        """The cores ``job`` used since the last round; ``None`` at the first round that sees
        it."""
        last = self._counters.get(job.job_id)
        self._counters[job.job_id] = (now_s, job.cpu_seconds)
        if last is None or now_s <= last[0]:
            return None
        return max(job.cpu_seconds - last[1], 0.0) / (now_s - last[0])


def _parse_targets(policy: str, text: object) -> tuple[float, ...]:
    """The throttle targets in ``text`` (comma-separated, ascending, each in ``[0, 1]``)."""
    if not isinstance(text, str):
        raise PolicyError(
            f"{policy}: parameter tower_targets={text!r} is not a string; give the targets "
            f"comma-separated, e.g. {TOWER_TARGETS!r}"
        )
    try:
        targets = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise PolicyError(
            f"{policy}: parameter tower_targets={text!r} is not a list of numbers; give the "
            f"targets comma-separated, e.g. {TOWER_TARGETS!r}"
        ) from None
    ascending = all(a < b for a, b in itertools.pairwise(targets))
    if not ascending or targets[0] < 0 or targets[-1] > 1:
        raise PolicyError(
            f"{policy}: parameter tower_targets={text!r} must be distinct targets in [0, 1] in "
            f"ascending order, e.g. {TOWER_TARGETS!r}"
        )
    return targets
