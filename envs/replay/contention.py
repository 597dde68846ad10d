"""Contention: the progress co-located jobs lose when their runnable threads exceed the cores.

Water-filling (:mod:`.sharing`) decides how many cores each job gets; a job's profile turns those
cores into progress as if it had them to itself. That is exact while the threads a worker's jobs
keep runnable fit its cores. Beyond that a job makes less progress per CPU-second it gets: its
threads are descheduled while their partners wait at a barrier (spinning, for stock framework
jobs), and caches are shared. ``dlsched calibrate --contention`` measures it
(:mod:`dlsched.runs.fidelity.contention_measurement`); the figures are in
``docs/replay-model.md`` ('Contention where threads exceed the cores').

The model has two numbers per threading, an exponent and a bound scale, fitted from them:

- **Threads.** A job at limit ``l`` on a worker of ``C`` cores keeps ``T`` threads: one per core
  (``T = C``) uncapped or with ``stock`` threading; ``ceil(l C)`` (at least 1) with ``tuned``
  threading, which follows its quota (:mod:`dlsched.envs.workloads.cpu_quota`). While it runs
  unthrottled it keeps ``u = min(T, demand_cores)`` of them busy.
- **Runnable threads.** A job under a CFS quota of ``q = l C`` cores is throttled for part of
  every period and has no runnable thread then. When ``N`` threads are runnable on the worker, a
  running job gets about ``u C / N`` cores while it runs, so it uses up its quota in a fraction
  ``min(1, q N / (C u))`` of the period: its duty cycle. ``N`` is therefore the largest fixed
  point of ``N = sum_i min(u_i, q_i N / C)`` (an uncapped job counts ``u_i``), solved exactly
  over the segments of that piecewise-linear, concave function by :func:`runnable_threads`.
- **Efficiency.** Where ``N > C``, a job progresses at its profile's throughput at the cores it
  gets times ``f + (1 - f) R ** -a`` (:func:`efficiency`) at the oversubscription ``R =
  max(1, n / C)`` of the ``n`` threads runnable beside it, where ``a`` is its workload's
  exponent (a profile's ``contention_exponent``, or else its threading's in the profile set's
  :class:`ContentionModel`) and ``f`` its floor (a profile's ``contention_floor``, else 0). The
  floor is what a crowded stock job keeps however many copies crowd it, which a power law
  fitted to few copies underestimates. The CPU a job uses does not change: spinning threads burn
  the CPU they are given.
- **Per job** (:func:`job_efficiencies`). A job whose duty cycle is 1 runs whenever it can; a
  throttled one (duty cycle below 1) runs only part of each period, and the jobs beside it see
  its threads only then. So each job sees its own threads and those of the jobs that run
  whenever they can, plus ``k`` of its throttled partners, ``k`` drawn as if their periods were
  independent (each runnable with the chance of its duty cycle: a Poisson-binomial count, each
  counting the mean busy threads of the worker's throttled jobs); its efficiency is the mean of
  the efficiencies at those ``n``, each weighed by the CPU the job gets then (``C / n`` per
  thread). An uncapped job beside throttled ones thus keeps most of its solo progress (it has
  the cores to itself while they wait), as measured: 0.83 beside one stock job at a quarter of
  the worker where free competition keeps 0.47. A throttled job's own exponent is ``s a``, ``s``
  its threading's ``bound_scales`` (fitted per job: ``dlsched calibrate --contention``): stock
  jobs under a quota lose less than the oversubscription they run in suggests, tuned ones
  (one thread per quota core) nothing. Where every job runs whenever it can, every job sees
  ``n = N``: the worker-wide oversubscription of earlier versions. Where ``N <= C`` the factor
  is exactly 1 and results are those of water-filling alone, bit for bit.
- **Beside a start-up.** While a job starts on an oversubscribed worker, each running job keeps
  at most its profile's ``efficiency_beside_startup``. A start-up is one runnable thread
  (measured), so ``R`` stays near 1.4 beside an uncapped stock job, where the curve keeps
  two thirds; the host keeps a quarter (its import of torch is no ordinary thread: memory
  maps and page faults by the gigabyte). Measured by ``dlsched calibrate`` as the first copy's
  progress while the next ones start.

A profile set holds its model in ``contention.json`` beside the profiles (format on
:func:`load_contention`); a set without one has no contention term.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, overload

import numpy as np

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.fit_provenance import FitProvenance, parse_provenance, provenance_data
from dlsched.envs.replay.model_file import read_model_file
from dlsched.envs.replay.race import RaceModel, race_data, races_by_threading
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading

#: Version of the contention file format this module reads.
CONTENTION_FORMAT = 1
#: The file name of a profile set's contention model.
CONTENTION_FILE = "contention.json"


#: Relative slack of the fixed point's comparisons. Quotas that sum to the cores (6 jobs at 1/6
#: of a worker) make every N below the breakpoints a fixed point; without the slack, rounding
#: (6 x 2/6 = 1.9999999999999998 cores) made the largest one the cores themselves: no contention.
FIXED_POINT_TOLERANCE = 1e-9


@overload
def crowded(runnable: float, cores: float) -> bool: ...


@overload
def crowded(runnable: np.ndarray, cores: np.ndarray) -> np.ndarray: ...


def crowded(runnable: np.ndarray | float, cores: np.ndarray | float) -> np.ndarray | bool:
    """Whether ``runnable`` threads exceed a worker's ``cores`` beyond rounding: where they do
    not, the threads fit and no job slows. Quotas and uncapped threads that fill the cores
    exactly (three jobs at 1.6 cores beside one keeping 3.2 busy, on 8) have ``N = C``, which
    summation order alone turned into ``8.000000000000005`` and a 2.5 % loss for every job."""
    return runnable > cores * (1.0 + FIXED_POINT_TOLERANCE)


def thread_counts(limits: np.ndarray, cores: float | np.ndarray, stock: np.ndarray) -> np.ndarray:
    """Threads each job keeps at its limit on a worker of ``cores`` cores.

    Args:
        limits: limits as fractions of the worker, in ``(0, 1]`` (1: no quota).
        cores: the worker's cores, or per job its worker's.
        stock: per job, whether it runs ``stock`` threading (else ``tuned``).
    """
    whole = np.maximum(1.0, np.floor(cores))
    # ceil of the quota in cores, as the workloads compute it from the cgroup's integers; the
    # small slack keeps 0.5 x 2 cores at one thread despite rounding.
    following = np.clip(np.ceil(limits * cores - 1e-9), 1.0, whole)
    return np.where(stock | (limits >= 1.0), whole, following)


def efficiency(ratio: float, exponents: np.ndarray, floors: np.ndarray) -> np.ndarray:
    """Progress per CPU-second of jobs at oversubscription ``ratio``, relative to alone.

    Args:
        ratio: the worker's oversubscription ``R >= 1``.
        exponents: per job, its exponent ``a``.
        floors: per job, its floor ``f`` in ``[0, 1)``.

    Returns:
        ``f + (1 - f) R ** -a`` per job; exactly ``R ** -a`` where ``f`` is 0.
    """
    return floors + (1.0 - floors) * ratio**-exponents


@dataclass(frozen=True)
class Crowding:
    """What each job of oversubscribed workers sees while it runs (see the module docstring).

    Rows are workers (of one or many episodes), columns their slots, and the last axis the
    states a job runs in: how many of its throttled partners are runnable beside it.

    Attributes:
        ratios: ``(rows, slots, states)``, the oversubscription ``max(1, n / C)`` of each state.
        weights: ``(rows, slots, states)``, each state's weight: its chance times the job's
            CPU in it (relative: a job's efficiency is the weighted mean over its states).
        throttled: ``(rows, slots)``, whether the job's quota throttles it (duty cycle < 1).
        present: ``(rows, slots)``, whether a slot holds a running or starting job.
    """

    ratios: np.ndarray
    weights: np.ndarray
    throttled: np.ndarray
    present: np.ndarray

    def efficiencies(
        self, exponents: np.ndarray, floors: np.ndarray, bound_scales: np.ndarray
    ) -> np.ndarray:
        """Each job's progress per CPU-second relative to alone; 1 in empty slots.

        Args:
            exponents: ``(rows, slots)``, each job's exponent ``a``.
            floors: ``(rows, slots)``, each job's floor ``f``.
            bound_scales: ``(rows, slots)``, the factor on a throttled job's exponent.
        """
        exponent = np.where(self.throttled, exponents * bound_scales, exponents)[:, :, None]
        floor = floors[:, :, None]
        kept = floor + (1.0 - floor) * self.ratios**-exponent
        # Divided by the weights' sum, not by weights normalised first: a job whose exponent
        # is 0 keeps exactly 1 then, as where the term is not applied at all.
        mean = (self.weights * kept).sum(axis=2) / self.weights.sum(axis=2)
        return np.where(self.present, mean, 1.0)


def crowding(
    busy: np.ndarray,
    quotas: np.ndarray,
    present: np.ndarray,
    runnable: np.ndarray,
    cores: np.ndarray,
) -> Crowding:
    """The states each job of oversubscribed workers runs in.

    Args:
        busy: ``(rows, slots)``, threads each job keeps busy while it runs unthrottled (``u``).
        quotas: ``(rows, slots)``, each job's quota in cores; ``inf`` without quota.
        present: ``(rows, slots)``, whether a slot holds a running or starting job.
        runnable: ``(rows,)``, the worker's runnable threads ``N`` (:func:`runnable_threads`),
            more than its cores.
        cores: ``(rows,)``, the worker's cores.
    """
    capacity = cores[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        duty = np.where(
            present & np.isfinite(quotas) & (busy > 0),
            np.minimum(1.0, quotas * runnable[:, None] / (capacity * busy)),
            1.0,
        )
    throttled = present & (duty < 1.0 - FIXED_POINT_TOLERANCE)
    # Where every job of a worker runs whenever it can, each sees the worker's N, in one state.
    unthrottled = np.maximum(1.0, runnable / cores)[:, None, None]
    if not throttled.any():  # the cheap, common case
        return Crowding(
            np.broadcast_to(unthrottled, (*busy.shape, 1)),
            np.ones((*busy.shape, 1)),
            throttled,
            present,
        )
    saturated = np.where(present & ~throttled, busy, 0.0).sum(axis=1, keepdims=True)
    # A job's own threads run whenever it does; its saturated partners' always do.
    always = saturated + np.where(throttled, busy, 0.0)
    partners = throttled.sum(axis=1)
    on_duty = np.where(throttled, duty, 0.0)
    per_partner = (np.where(throttled, busy, 0.0).sum(axis=1) / np.maximum(partners, 1))[
        :, None, None
    ]
    # chances[r, i, k]: that k of job i's throttled partners are runnable while it runs, their
    # throttling periods independent of each other and of job i's (Poisson-binomial).
    rows, slots = busy.shape
    chances = np.zeros((rows, slots, slots + 1))
    chances[:, :, 0] = 1.0
    others = ~np.eye(slots, dtype=bool)
    for partner in range(slots):
        if not throttled[:, partner].any():
            continue
        on = (on_duty[:, partner][:, None] * others[partner][None, :])[:, :, None]
        chances[:, :, 1:] = chances[:, :, 1:] * (1.0 - on) + chances[:, :, :-1] * on
        chances[:, :, :1] *= 1.0 - on
    threads = always[:, :, None] + np.arange(slots + 1)[None, None, :] * per_partner
    ratio = np.maximum(1.0, threads / capacity[:, :, None])
    # A job's CPU in each state is its threads' share of the cores then: the states weigh by it.
    weights = chances / ratio
    # A worker without a throttled job runs in its one state, as where no worker has one: its
    # efficiencies are then its own jobs' alone, bit for bit, whatever other workers (of its
    # episode, or of other episodes in a batch) are computed beside it. Spread over the states,
    # its weights would be 1/R and R its saturated threads, rounded otherwise than N.
    calm = ~throttled.any(axis=1)
    ratio[calm] = unthrottled[calm]
    weights[calm] = 0.0
    weights[calm, :, 0] = 1.0
    return Crowding(ratio, weights, throttled, present)


def job_efficiencies(
    busy: np.ndarray,
    quotas: np.ndarray,
    present: np.ndarray,
    runnable: np.ndarray,
    cores: np.ndarray,
    exponents: np.ndarray,
    floors: np.ndarray,
    bound_scales: np.ndarray,
) -> np.ndarray:
    """Each job's progress per CPU-second on oversubscribed workers, relative to alone.

    :func:`crowding`'s states, then :meth:`Crowding.efficiencies`; all arrays as they describe
    them.
    """
    return crowding(busy, quotas, present, runnable, cores).efficiencies(
        exponents, floors, bound_scales
    )


def runnable_threads(busy: np.ndarray, quotas: np.ndarray, cores: float) -> float:
    """Mean runnable threads of a worker's running jobs (see the module docstring).

    Args:
        busy: per job, threads it keeps busy while it runs unthrottled (``u``).
        quotas: per job, its quota in cores; ``inf`` for a job without quota.
        cores: the worker's cores.

    Returns:
        ``sum(busy)`` when that fits the cores; otherwise the largest fixed point of
        ``N = sum(min(busy, quotas * N / cores))``, at least ``cores``.
    """
    total = float(busy.sum())
    if total <= cores:
        return total
    return float(
        crowded_runnable_threads(
            busy[None, :],
            quotas[None, :],
            np.ones((1, len(busy)), dtype=bool),
            np.array([total]),
            np.array([float(cores)]),
        )[0]
    )


def crowded_runnable_threads(
    busy: np.ndarray,
    quotas: np.ndarray,
    present: np.ndarray,
    total: np.ndarray,
    cores: np.ndarray,
) -> np.ndarray:
    """:func:`runnable_threads` of many workers whose busy threads exceed their cores.

    A job saturates (counts all its busy threads) above its breakpoint ``cores * u / q`` and is
    quota-bound below it; an uncapped job always saturates. The function is piecewise linear
    between the breakpoints: every segment of every worker is evaluated at once and the first,
    from the top, that holds a fixed point gives it.

    Args:
        busy: ``(rows, slots)``, threads each job keeps busy unthrottled; 0 in empty slots.
        quotas: ``(rows, slots)``, each job's quota in cores (``inf`` without quota); 0 in
            empty slots.
        present: ``(rows, slots)``, whether a slot holds a job.
        total: ``(rows,)``, the busy threads of each worker, more than its cores.
        cores: ``(rows,)``, each worker's cores.
    """
    capacity = cores[:, None]
    slots = busy.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        breaks = np.where(
            np.isfinite(quotas), capacity * busy / np.where(quotas > 0, quotas, 1.0), 0.0
        )
        # Empty slots sort after every job, so the segments are those of the jobs alone.
        breaks = np.where(present, breaks, -1.0)
        order = np.argsort(-breaks, axis=1, kind="stable")
        breaks_s = np.take_along_axis(breaks, order, axis=1)
        busy_s = np.take_along_axis(busy, order, axis=1)
        quota_s = np.take_along_axis(np.where(present, quotas, 0.0), order, axis=1)
        count = present.sum(axis=1)
        positions = np.arange(slots + 1)[None, :]
        zero = np.zeros((len(busy_s), 1))
        saturated = total[:, None] - np.concatenate((zero, np.cumsum(busy_s, axis=1)), axis=1)
        bound_quota = np.concatenate((zero, np.cumsum(quota_s, axis=1)), axis=1)
        upper = np.concatenate((np.full((len(busy_s), 1), math.inf), breaks_s), axis=1)
        # Below the last breakpoint every job is quota-bound: that segment reaches down to 0.
        lower = np.concatenate((breaks_s, zero), axis=1)
        lower = np.where(positions >= count[:, None], -math.inf, lower)
        fixed = saturated / (1.0 - bound_quota / capacity)
        slack = 1.0 - FIXED_POINT_TOLERANCE
        # Where the quotas bound at least the cores, F(N) >= N all through the segment, so the
        # fixed point is its upper end.
        saturates = bound_quota >= capacity * slack
        holds = (saturates | (fixed >= lower * slack)) & (positions <= count[:, None])
        first = np.argmax(holds, axis=1)
        pick = np.arange(len(first))
        return np.where(
            saturates[pick, first],
            np.maximum(upper[pick, first], cores),
            np.maximum(np.minimum(fixed[pick, first], upper[pick, first]), cores),
        )


@dataclass(frozen=True)
class ContentionModel:
    """Per threading, how fast progress per CPU-second falls with oversubscription.

    Attributes:
        exponents: ``a`` by threading: a job's efficiency is ``R ** -a`` at oversubscription
            ``R >= 1``. 0 means no contention.
        fit: how the exponents were obtained.
        bound_scales: by threading, the factor on the exponent of a job its quota throttles
            (1: as a job that runs whenever it can).
        races: by threading, how a crowded job's pace switches between levels around its mean
            efficiency (:mod:`.race`); a threading it does not name has no race.
    """

    exponents: Mapping[Threading, float]
    fit: FitProvenance | None = None
    bound_scales: Mapping[Threading, float] = field(
        default_factory=lambda: {threading: 1.0 for threading in THREADINGS}
    )
    races: Mapping[Threading, RaceModel] = field(default_factory=dict)

    def efficiency(self, threading: Threading, oversubscription: float) -> float:
        """Progress per CPU-second relative to running alone, at ``oversubscription``."""
        if oversubscription <= 1.0:
            return 1.0
        return float(oversubscription ** -self.exponents.get(threading, 0.0))


#: The model of a profile set without ``contention.json``: water-filling alone.
NO_CONTENTION = ContentionModel(exponents={threading: 0.0 for threading in THREADINGS})


def busy_and_quotas(
    limits: np.ndarray, demands: np.ndarray, stock: np.ndarray, cores: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the threads it keeps busy unthrottled and its quota in cores.

    Args:
        limits: per job, its limit as a fraction of the worker in ``(0, 1]`` (1: no quota,
            whose quota is ``inf``).
        demands: per job, the cores it keeps busy uncapped (its profile's ``demand_cores``).
        stock: per job, whether it runs ``stock`` threading.
        cores: the worker's cores, or per job its worker's.
    """
    busy = np.minimum(thread_counts(limits, cores, stock), demands)
    return busy, np.where(limits >= 1.0, math.inf, limits * cores)


def oversubscription(
    limits: np.ndarray,
    demands: np.ndarray,
    stock: np.ndarray,
    cores: float,
) -> float:
    """``R = max(1, N / cores)`` of one worker's running jobs.

    Args:
        limits: per job, its limit as a fraction of the worker in ``(0, 1]``.
        demands: per job, the cores it keeps busy uncapped (its profile's ``demand_cores``).
        stock: per job, whether it runs ``stock`` threading.
        cores: the worker's cores.
    """
    busy, quotas = busy_and_quotas(limits, demands, stock, cores)
    return max(1.0, runnable_threads(busy, quotas, cores) / cores)


def load_contention(directory: Path) -> ContentionModel:
    """The contention model of the profile set in ``directory`` (none without the file).

    The file is a JSON object::

        {"format": 1,
         "exponents": {"tuned": 0.13, "stock": 1.11},
         "bound_scales": {"tuned": 0.0, "stock": 0.77},
         "fit": {"source": "dlsched calibrate --contention ...", "host": "...",
                 "date": "2026-11-25", "objective": "...", "residuals": ["...", ...]},
         "measurements": {...}}

    ``bound_scales`` is optional (1 for a threading it does not name). ``measurements`` holds
    what the exponents and bound scales were fitted to, as ``dlsched calibrate
    --contention`` recorded it (``runs.fidelity.contention_grid.recorded_measurement`` reads
    it; the replay model does not).

    Raises:
        ProfileError: the file is not valid JSON or a field is malformed; the message names the
            file, the field, the value and what was expected.
    """
    path = directory / CONTENTION_FILE
    data = read_model_file(path, "contention")
    return NO_CONTENTION if data is None else parse_contention(data, str(path))


def parse_contention(data: Any, where: str) -> ContentionModel:
    """Check and read a contention object (the contents of ``contention.json``).

    Args:
        data: the decoded JSON.
        where: names the source in messages.

    Raises:
        ProfileError: a field is missing or malformed.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ProfileError(
            f"contention file {where} holds {type(data).__name__}, expected an object"
        )
    known = {"format", "exponents", "bound_scales", "races", "fit", "measurements"}
    listing = ", ".join(sorted(known))
    for key in sorted(set(data) - known):
        problems.append(f"{key}: unknown field; known fields: {listing}")
    if data.get("format") != CONTENTION_FORMAT:
        problems.append(f"format: got {data.get('format')!r}, expected {CONTENTION_FORMAT}")
    exponents = _numbers_per_threading(
        data.get("exponents"),
        "exponents",
        "exponent",
        lambda value: value >= 0,
        "a number >= 0",
        problems,
    )
    bound_scales = _numbers_per_threading(
        data.get("bound_scales", {}),
        "bound_scales",
        "factor",
        lambda value: 0 <= value <= 1,
        "a number in [0, 1]",
        problems,
    )
    races: dict[Threading, RaceModel] = {}
    raw_races = data.get("races", {})
    if not isinstance(raw_races, dict):
        problems.append(f"races: got {raw_races!r}, expected an object of threading to race")
    else:
        for key in sorted(set(raw_races) - set(THREADINGS)):
            problems.append(f"races.{key}: unknown threading; expected one of {THREADINGS}")
        found, race_problems = races_by_threading(
            {key: value for key, value in raw_races.items() if key in THREADINGS}, "races"
        )
        problems += race_problems
        races = {cast(Threading, key): model for key, model in found.items()}
    fit = None
    if data.get("fit") is not None:
        fit, fit_problems = parse_provenance(data["fit"], "fit")
        problems += fit_problems
    if problems:
        raise ProfileError(f"contention file {where} is malformed:\n  " + "\n  ".join(problems))
    return ContentionModel(
        exponents={threading: exponents.get(threading, 0.0) for threading in THREADINGS},
        fit=fit,
        bound_scales={threading: bound_scales.get(threading, 1.0) for threading in THREADINGS},
        races=races,
    )


def _numbers_per_threading(
    raw: Any,
    field: str,
    number: str,
    accepts: Callable[[float], bool],
    expected: str,
    problems: list[str],
) -> dict[Threading, float]:
    """The numbers of ``raw``, an object of threading to number (the file's ``field``); what is
    wrong with it is added to ``problems``, and its wrong entries are left out.

    Args:
        raw: the field's decoded JSON.
        field: the field's name, for the problems.
        number: what each number is (``exponent``), for the problems.
        accepts: whether a finite number is in the field's range.
        expected: the range, for the problems (``a number >= 0``).
        problems: where the problems go.
    """
    numbers: dict[Threading, float] = {}
    if not isinstance(raw, dict):
        problems.append(f"{field}: got {raw!r}, expected an object of threading to {number}")
        return numbers
    for key, value in raw.items():
        if key not in THREADINGS:
            problems.append(f"{field}.{key}: unknown threading; expected one of {THREADINGS}")
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and accepts(value))
        ):
            problems.append(f"{field}.{key}: got {value!r}, expected {expected}")
        else:
            numbers[key] = float(value)
    return numbers


def contention_data(model: ContentionModel) -> dict[str, Any]:
    """The JSON object of ``model``, as :func:`load_contention` reads it."""
    data: dict[str, Any] = {
        "format": CONTENTION_FORMAT,
        "exponents": dict(model.exponents),
        "bound_scales": dict(model.bound_scales),
    }
    if model.races:
        data["races"] = {threading: race_data(race) for threading, race in model.races.items()}
    if model.fit is not None:
        data["fit"] = provenance_data(model.fit)
    return data
