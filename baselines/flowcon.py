"""FlowCon: growth-efficiency based CPU limits (and placement) for training containers.

Source: the FlowCon journal version, as ``docs/papers/flowcon.md`` summarises it: Section 4, Eq. 1-2
(progress score and growth efficiency, measured by :mod:`dlsched.baselines.growth`); Section 5.2
with Algorithm 1 (dynamic resource management on a worker); Section 5.3 with Algorithm 2 (the
listener); Section 5.4 with Algorithm 3 (adaptive threshold); Section 5.5 with Algorithm 4
(container placement on the manager). Where the journal is silent, the defaults are those of the
authors' public 2018 code (repository ``yingmao/FlowCon2018``): a 30 s interval, a first threshold
of 0.03 and losses divided by their running maximum.

The core (:func:`listener`, :func:`adaptive_threshold`, :func:`dynamic_resource_management`,
:func:`select_worker`) works on one round's lists and measurements under the paper's names;
:class:`FlowCon` and :class:`FlowConPlacer` build them from telemetry.

Choices the sources leave open, and what this module does:

- **Lines 25-26 of Alg. 1** (the limit of a container in NL) are garbled in the text. The 2018
  code gives it ``min(G_i / sum(G), 1)`` (``nl_limit="share"``, default); ``nl_limit="uncapped"``
  gives it 1, as Section 6.3 describes for the newly arrived MNIST job. A container in NL with no
  growth efficiency yet (just arrived) is uncapped either way, as in Section 6.3.
- **The floor of CL limits** (line 22) is ``1 / n`` as printed (``cl_floor="paper"``);
  ``"code2018"`` uses the 2018 code's ``1 / (beta * n)`` with ``beta = 1 + 1 / n``. On a worker
  whose containers all want more than an equal share, ``1 / n`` is their max-min fair share, so
  a CL cap there does not bind; the CPU shares Section 6 reports for CL jobs (22-25%) lie below
  ``1 / n``, which the printed floor cannot produce.
- **The unit of ``R``** in Eq. 2 (``usage_unit``): cores by default, which reproduces Section
  6.3's capped VAE; see :mod:`dlsched.baselines.growth`.
- **Alg. 3, line 13** averages the progress of NL and WL in the pseudocode but of NL and CL in the
  prose; ``threshold_lists`` picks ``"NL+WL"`` (default, the pseudocode) or ``"NL+CL"``. Each
  list's average runs over its members that have a progress score; a list with none adds 0, so
  with one list the threshold is half its average, as line 6 gives for a single container. With
  no progress score at all the threshold keeps its last value. Alg. 3 runs before every run of
  Alg. 1; ``adaptive_threshold=False`` keeps ``alpha_initial`` throughout, as the 2018 code did.
- **Alg. 2** compares the number of containers between two checks, so an arrival and a departure
  in the same interval would cancel out; this listener compares the sets of container ids, which
  catches both (in Section 5.3 the listener identifies new and finished containers by id). It
  checks every environment interval.
- **Sums over containers with no measurement.** ``sum(G)`` and the list scores of Alg. 4 run over
  the containers that have a growth efficiency; if that sum is not positive, every share is the
  equal ``1 / n``. A container in CL without a new measurement (it used no CPU) keeps its limit.
- **Alg. 4** counts a container placed since its worker's last round in NL, without a growth
  efficiency, as Section 6.4 describes for the manager's outdated reports; an empty worker counts as
  one whose containers are all in CL, with none, so it wins first. Ties go to the lowest index.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from dlsched.baselines.base import Baseline, round_due
from dlsched.baselines.growth import USAGE_UNITS, GrowthMeter
from dlsched.baselines.parameters import check_choice, check_flag, check_number
from dlsched.envs.decision import Decision
from dlsched.envs.placement import Placer
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import JobState, Telemetry

THRESHOLD_LISTS = ("NL+WL", "NL+CL")
CL_FLOORS = ("paper", "code2018")
NL_LIMITS = ("share", "uncapped")

#: Alg. 3 sets the threshold to this when every container is in CL, which turns Alg. 1 off.
DEACTIVATED = -1.0


@dataclass(frozen=True)
class Lists:
    """The new (NL), watching (WL) and completing (CL) lists of one worker (Section 5.2)."""

    NL: frozenset[str] = frozenset()
    WL: frozenset[str] = frozenset()
    CL: frozenset[str] = frozenset()

    @property
    def members(self) -> frozenset[str]:
        return self.NL | self.WL | self.CL

    def without(self, gone: Collection[str]) -> Lists:
        """The lists with the containers in ``gone`` removed (Alg. 2, lines 11-14)."""
        drop = frozenset(gone)
        return Lists(self.NL - drop, self.WL - drop, self.CL - drop)


@dataclass(frozen=True)
class ListenerRound:
    """One check of Alg. 2: the lists, the interval, and whether Alg. 1 runs at once."""

    lists: Lists
    itval: float
    run_now: bool


def listener(
    lists: Lists, present: Collection[str], *, itval: float, itval_initial: float
) -> ListenerRound:
    """Alg. 2 (Section 5.3): put new containers in NL, drop finished ones, and react at once.

    Args:
        lists: the worker's lists after the last check.
        present: the containers running on the worker now.
        itval: the interval of Alg. 1 in force.
        itval_initial: the interval to reset to (lines 8 and 16).

    Returns:
        New containers in NL (lines 5-7), finished ones removed (lines 10-15); if either
        happened, the interval reset and Alg. 1 to run now (lines 8-9, 16-17).
    """
    new = frozenset(present) - lists.members
    gone = lists.members - frozenset(present)
    if not new and not gone:
        return ListenerRound(lists, itval, run_now=False)
    kept = lists.without(gone)
    return ListenerRound(Lists(kept.NL | new, kept.WL, kept.CL), itval=itval_initial, run_now=True)


def adaptive_threshold(
    lists: Lists, P: Mapping[str, float], *, alpha: float, pair: str = "NL+WL"
) -> float:
    """Alg. 3 (Section 5.4): the threshold ``alpha`` of the next run of Alg. 1.

    Args:
        lists: the worker's lists.
        P: the progress score (Eq. 1) of each container that has one.
        alpha: the threshold in force, kept when there is nothing to compute one from.
        pair: the second list averaged with NL at line 13, ``"NL+WL"`` or ``"NL+CL"``.

    Returns:
        ``-1`` when every container is in CL (lines 2-4); half the progress of a lone container
        (lines 5-7); otherwise the mean of the two lists' average progress (lines 8-13).
    """
    w_i = lists.members
    if not w_i:
        return alpha
    if len(lists.CL) == len(w_i):  # line 2
        return DEACTIVATED  # line 3
    if len(w_i) == 1:  # line 5
        (c_id,) = w_i
        return P[c_id] / 2 if c_id in P else alpha  # line 6
    second = lists.WL if pair == "NL+WL" else lists.CL
    alpha_nl = [P[c] for c in lists.NL if c in P]  # lines 9-10
    alpha_second = [P[c] for c in second if c in P]  # lines 11-12
    if not alpha_nl and not alpha_second:
        return alpha
    mean_nl = sum(alpha_nl) / len(alpha_nl) if alpha_nl else 0.0
    mean_second = sum(alpha_second) / len(alpha_second) if alpha_second else 0.0
    return (mean_nl + mean_second) / 2  # line 13


@dataclass(frozen=True)
class ManagementRound:
    """One run of Alg. 1: the new lists, every container's limit, and the next interval."""

    lists: Lists
    L: dict[str, float]
    itval: float


def dynamic_resource_management(
    G: Mapping[str, float],
    L: Mapping[str, float],
    lists: Lists,
    *,
    alpha: float,
    itval: float,
    cl_floor: str = "paper",
    nl_limit: str = "share",
) -> ManagementRound:
    """Alg. 1 (Section 5.2): move containers between the lists and set their limits.

    Args:
        G: the growth efficiency (Eq. 2) of each container that has one this round.
        L: the limit in force of every container on the worker (fraction of the worker).
        lists: the lists before this round; they hold exactly the containers of ``L``.
        alpha: the threshold; ``-1`` skips the reclassification (line 2).
        itval: the interval in force.
        cl_floor: ``"paper"`` (``1 / n``, line 22) or ``"code2018"`` (``1 / (beta n)``).
        nl_limit: ``"share"`` (``min(G_i / sum(G), 1)``) or ``"uncapped"`` (1).

    Returns:
        The new lists and limits; the interval doubles when every container is in CL (line 17).
    """
    NL, WL, CL = set(lists.NL), set(lists.WL), set(lists.CL)
    if alpha != DEACTIVATED:  # line 2
        for c_id in L:
            if c_id not in G:
                continue  # no growth efficiency yet: it stays where it is
            if G[c_id] < alpha and c_id in NL:  # line 4
                NL.remove(c_id)  # line 5
                WL.add(c_id)  # line 6
            elif G[c_id] < alpha and c_id in WL:  # line 7
                WL.remove(c_id)  # line 8
                CL.add(c_id)  # line 9
            elif G[c_id] >= alpha:  # line 10
                NL.add(c_id)  # line 11
                WL.discard(c_id)  # line 12
                CL.discard(c_id)  # line 13
    new_lists = Lists(frozenset(NL), frozenset(WL), frozenset(CL))
    if all(c_id in CL for c_id in L):  # line 14
        return ManagementRound(new_lists, {c_id: 1.0 for c_id in L}, itval * 2)  # lines 15-17
    n = len(L)
    floor = 1 / n if cl_floor == "paper" else 1 / ((1 + 1 / n) * n)
    sum_G = sum(G[c_id] for c_id in L if c_id in G)

    def share(c_id: str) -> float:
        return G[c_id] / sum_G if sum_G > 0 else 1 / n

    limits: dict[str, float] = {}
    for c_id in L:  # line 19
        if c_id in CL:  # line 20
            limits[c_id] = max(share(c_id), floor) if c_id in G else L[c_id]  # lines 21-22
        elif c_id in WL:  # line 23
            limits[c_id] = L[c_id]  # line 24
        elif c_id in G and nl_limit == "share":
            limits[c_id] = min(share(c_id), 1.0)  # lines 25-26
        else:
            limits[c_id] = 1.0
    return ManagementRound(new_lists, limits, itval)


@dataclass(frozen=True)
class WorkerLists:
    """What the manager knows of one worker for Alg. 4.

    Attributes:
        index: the worker.
        lists: its lists at its last round.
        G: the last growth efficiency of its containers that have one.
        unlisted: containers placed on it since its last round (counted in NL).
    """

    index: int
    lists: Lists
    G: Mapping[str, float] = field(default_factory=dict)
    unlisted: int = 0

    @property
    def all_completing(self) -> bool:
        """Alg. 4, line 3: every container of the worker is in CL (true of an empty worker)."""
        return not self.lists.NL and not self.lists.WL and self.unlisted == 0

    def D(self, members: frozenset[str]) -> float:
        """Lines 7-9: the summed growth efficiency of one list."""
        return sum(self.G.get(c_id, 0.0) for c_id in members)

    @property
    def score(self) -> float:
        """Line 10: ``|NL + 1| D_NL + |WL| D_WL + |CL| D_CL``."""
        nl = len(self.lists.NL) + self.unlisted
        return (
            (nl + 1) * self.D(self.lists.NL)
            + len(self.lists.WL) * self.D(self.lists.WL)
            + len(self.lists.CL) * self.D(self.lists.CL)
        )


def select_worker(workers: Sequence[WorkerLists]) -> int:
    """Alg. 4 (Section 5.5): the worker that hosts an incoming container.

    A worker whose containers are all in CL wins first, the one with the fewest (lines 2-5);
    otherwise the lowest score (lines 10-13). Ties go to the lowest index.
    """
    completing = [w for w in workers if w.all_completing]
    if completing:
        return min(completing, key=lambda w: (len(w.lists.CL), w.index)).index
    return min(workers, key=lambda w: (w.score, w.index)).index


@dataclass(frozen=True)
class _WorkerState:
    lists: Lists
    itval: float
    alpha: float
    last_run_s: float | None = None


class FlowCon(Baseline):
    """FlowCon (journal version): give CPU to the training jobs whose loss still falls fast.

    Every environment interval the listener (Alg. 2) checks each worker's containers; every
    ``itval`` seconds, or at once when a container arrives or leaves, Alg. 3 sets the threshold
    and Alg. 1 reclassifies the containers and sets their limits. On several workers, arriving
    jobs are placed by Alg. 4. See the module docstring for the choices the sources leave open.

    Args:
        itval_s: the initial interval of Alg. 1 (2018 code: 30 s).
        alpha_initial: the threshold before Alg. 3 first sets one (2018 code: 0.03).
        adaptive_threshold: run Alg. 3 (``False``: keep ``alpha_initial``, as the 2018 code).
        threshold_lists: ``"NL+WL"`` (Alg. 3 line 13 as printed) or ``"NL+CL"`` (the prose).
        cl_floor: ``"paper"`` (``1 / n``) or ``"code2018"`` (``1 / (beta n)``).
        nl_limit: ``"share"`` (the 2018 code) or ``"uncapped"`` (Section 6.3).
        normalise_loss: divide each loss by its running maximum (the 2018 code).
        usage_unit: ``R`` of Eq. 2 in ``"cores"`` (Section 6.3's behaviour) or ``"fraction"`` of
            the worker (the 2018 code); see :mod:`dlsched.baselines.growth`.
        placement: place arriving jobs with Alg. 4 (``False``: the environment's placer).
    """

    name = "flowcon"
    kinds = (JobKind.TRAINING,)

    def __init__(
        self,
        itval_s: float = 30.0,
        alpha_initial: float = 0.03,
        adaptive_threshold: bool = True,
        threshold_lists: str = "NL+WL",
        cl_floor: str = "paper",
        nl_limit: str = "share",
        normalise_loss: bool = True,
        usage_unit: str = "cores",
        placement: bool = True,
    ) -> None:
        super().__init__()
        self.itval_s = check_number(self.name, "itval_s", itval_s, low=0.0, low_open=True)
        self.alpha_initial = check_number(self.name, "alpha_initial", alpha_initial, low=0.0)
        self.adaptive_threshold = check_flag(self.name, "adaptive_threshold", adaptive_threshold)
        self.threshold_lists = check_choice(
            self.name, "threshold_lists", threshold_lists, THRESHOLD_LISTS
        )
        self.cl_floor = check_choice(self.name, "cl_floor", cl_floor, CL_FLOORS)
        self.nl_limit = check_choice(self.name, "nl_limit", nl_limit, NL_LIMITS)
        self.normalise_loss = check_flag(self.name, "normalise_loss", normalise_loss)
        self.usage_unit = check_choice(self.name, "usage_unit", usage_unit, USAGE_UNITS)
        self.placement = check_flag(self.name, "placement", placement)
        self._meter = GrowthMeter(self.normalise_loss, self.usage_unit)
        self._workers: dict[int, _WorkerState] = {}
        self._G: dict[str, float] = {}
        self._placer = FlowConPlacer(self) if self.placement else None

    @property
    def placer(self) -> Placer | None:
        return self._placer

    def reset(self) -> None:
        self._meter.reset()
        self._workers = {}
        self._G = {}

    def lists(self, worker: int) -> Lists:
        """The lists of ``worker`` after the last round (empty before its first)."""
        state = self._workers.get(worker)
        return state.lists if state is not None else Lists()

    def threshold(self, worker: int) -> float:
        """The threshold ``alpha`` of ``worker`` in force."""
        state = self._workers.get(worker)
        return state.alpha if state is not None else self.alpha_initial

    def last_growth(self) -> dict[str, float]:
        """The last growth efficiency measured of each job."""
        return dict(self._G)

    def act(self, telemetry: Telemetry) -> Decision:
        self._meter.observe(telemetry)
        now = telemetry.time_s
        limits: dict[str, float] = {}
        for worker in telemetry.workers:
            running = [
                job for job in telemetry.on_worker(worker.index) if job.state is JobState.RUNNING
            ]
            state = self._workers.get(
                worker.index, _WorkerState(Lists(), self.itval_s, self.alpha_initial)
            )
            heard = listener(
                state.lists,
                [job.job_id for job in running],
                itval=state.itval,
                itval_initial=self.itval_s,
            )
            due = heard.run_now or round_due(state.last_run_s, now, heard.itval)
            if not due or not running:
                last_run_s = now if due else state.last_run_s
                self._workers[worker.index] = _WorkerState(
                    heard.lists, heard.itval, state.alpha, last_run_s
                )
                continue
            P: dict[str, float] = {}
            G: dict[str, float] = {}
            for job in running:
                sample = self._meter.take(job, now, worker.cores)
                if sample is None:
                    continue
                P[job.job_id] = sample.P
                if sample.G is not None:
                    G[job.job_id] = sample.G
            alpha = state.alpha
            if self.adaptive_threshold:
                alpha = adaptive_threshold(heard.lists, P, alpha=alpha, pair=self.threshold_lists)
            result = dynamic_resource_management(
                G,
                {job.job_id: job.limit for job in running},
                heard.lists,
                alpha=alpha,
                itval=heard.itval,
                cl_floor=self.cl_floor,
                nl_limit=self.nl_limit,
            )
            limits.update(result.L)
            self._G.update(G)
            self._workers[worker.index] = _WorkerState(result.lists, result.itval, alpha, now)
        return Decision(limits=limits)


class FlowConPlacer(Placer):
    """Alg. 4 on the manager: places arriving jobs from its FlowCon policy's last rounds."""

    def __init__(self, policy: FlowCon) -> None:
        self.policy = policy

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        workers = []
        G = self.policy.last_growth()
        for index in candidates:
            present = {j.job_id for j in telemetry.on_worker(index)}
            known = self.policy.lists(index)
            lists = Lists(known.NL & present, known.WL & present, known.CL & present)
            workers.append(WorkerLists(index, lists, G, unlisted=len(present - lists.members)))
        return select_worker(workers)
