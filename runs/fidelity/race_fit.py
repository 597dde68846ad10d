"""Fitting the race (:mod:`dlsched.envs.replay.race`) from host episodes.

A host episode on Docker records, every step, each job's units so far and the cores it used.
Where stock jobs crowd a worker, a job's progress in a step over what the deterministic replay
model gives it at those cores and that crowding is the race's level times the noise of counting
whole units: :func:`crowded_efficiencies` cuts those series out of an episode. The levels are
thus measured against the model, whose crowding curves (:mod:`.crowd_fit`) are fitted to the
same steps first: the curves carry the mean of crowded progress, the race its spread, and the
levels are divided by their long-run mean. The more jobs crowd a worker, the less
they race: :func:`fit_fade` finds how fast the spread shrinks with the oversubscription, and
:func:`level_multipliers` the levels behind each step's ratio at that fade. :func:`fit_race`
then finds the levels and the chain between them:

1. **Levels**: a one-dimensional k-means of the log ratios of every step of every series
   (started at evenly spaced quantiles, so the fit is deterministic).
2. **Which level each step is at**: a few rounds of hard expectation-maximisation on a hidden
   Markov chain: each series labelled by Viterbi (Gaussian log ratios around the levels; a
   switch costs what the chain's switching rate says, so that the noise of counting whole
   units makes no switches of its own), then the levels and the rate estimated anew. A level's
   value is the mean ratio of its steps.
3. **Holding times**: a level's mean holding time is the seconds spent in it over the runs that
   ended in it (the exponential's maximum likelihood, the runs a series' end cut short counted
   as censored).
4. **Jumps**: the counts of each level-to-level move, over the moves out of the level (a level
   never left gets the others' chances, evenly).

Steps are the resolution: switches within a step are averaged into its ratio, so holding times
shorter than a few steps are not recovered (the host's are tens of seconds, issue #32).
:func:`fit_race_to_episodes` runs all of it over recorded episodes, :func:`write_race` puts the
result, with its provenance, into a profile set, and :func:`fit_crowding_and_race` fits and
writes the curves, then the race (``dlsched calibrate --race-from``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlsched.envs.errors import ArgumentError, ProfileError
from dlsched.envs.replay.contention import (
    CONTENTION_FILE,
    efficiency,
    parse_contention,
)
from dlsched.envs.replay.fit_provenance import FitProvenance
from dlsched.envs.replay.profile import load_set_contention, profile_set_directory
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.replay.race import RaceModel, race_data, race_reach
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.crowd_fit import (
    WorkloadCrowding,
    crowded_steps,
    crowding_from_episodes,
    write_crowding,
)
from dlsched.runs.fidelity.host_speed import HOST_SPEED_FILE, HostSpeed, read_host_speed
from dlsched.runs.fidelity.rescaled_profiles import write_rescaled_set
from dlsched.runs.tracking.trajectory import EPISODE_FILE, read_episode, recorded_backend

#: k-means rounds at most (it stops once no second changes level).
MAX_ROUNDS = 100
#: Rounds of labelling by Viterbi and re-estimating the levels.
HMM_ROUNDS = 5
#: Seconds a series needs to count: shorter spells of crowding tell nothing of holding times.
MIN_SERIES_S = 10


@dataclass(frozen=True)
class RaceFit:
    """A fitted race and how well it fits.

    Attributes:
        model: the race.
        seconds: the seconds of pace it was fitted to.
        series: how many series (crowded spells of a job) they came from.
        residuals: one line per level: its pace, its share of the seconds, its holding time and
            how many runs ended in it.
    """

    model: RaceModel
    seconds: int
    series: int
    residuals: tuple[str, ...]


@dataclass(frozen=True)
class CrowdedSpell:
    """One job's steps in a row on a crowded worker.

    Attributes:
        ratios: per step, the job's progress over the model's.
        oversubscription: per step, the worker's ``R`` (:mod:`.contention`).
    """

    ratios: np.ndarray
    oversubscription: np.ndarray


def crowded_efficiencies(
    result: EpisodeResult, profile_set: str, threading: Threading = "stock", full_at: float = 2.0
) -> list[CrowdedSpell]:
    """Per job of ``threading`` and spell of whole steps in which its worker was crowded to at
    least ``full_at``, the job's progress in each step over what the deterministic model gives
    it there: the race's level in that step, times the noise of counting whole units.

    What the model gives a job in a step is its profile's throughput at the cores the host gave
    it in the step (its ``cpu_usage``), times its contention efficiency (:mod:`.contention`) at
    the oversubscription of the jobs its worker ran through the whole step. So the race's
    levels are measured against the model, not against the job's own mean: their long-run mean
    is the share of the model's crowded progress the host delivers, and their spread the race.
    A step counts where the same jobs ran on the worker from its start to its end, each past its
    first unit (a start-up or a finish inside the step would count as a slow level) and none
    under a quota.

    Args:
        result: an episode read with its containers (:func:`read_episode`).
        profile_set: the profile set the race is fitted for (a shipped name or a folder).
        threading: the threading whose jobs are cut out.
        full_at: the oversubscription from which the race's levels apply whole: less crowded
            steps are left out.

    Raises:
        UnknownNameError: a workload of the episode has no profile in ``profile_set``.
    """
    table = ProfileTable(dataclasses.replace(result.scenario, profile_set=profile_set))
    series: list[CrowdedSpell] = []
    spells: dict[str, list[tuple[float, float]]] = {}
    for step in crowded_steps(result, table, threading):
        ratios = {}
        for job in step:
            if job.oversubscription >= full_at:
                row = table.index[job.workload]
                kept = efficiency(job.oversubscription, table.exponent[row], table.floor[row])
                ratios[job.job_id] = (job.done / (job.solo * float(kept)), job.oversubscription)
        for job_id in [job_id for job_id in spells if job_id not in ratios]:
            series.append(_spell(spells.pop(job_id)))
        for job_id, ratio in ratios.items():
            spells.setdefault(job_id, []).append(ratio)
    series.extend(_spell(values) for values in spells.values())
    return [spell for spell in series if len(spell.ratios) >= MIN_SERIES_S]


def _spell(steps: Sequence[tuple[float, float]]) -> CrowdedSpell:
    values = np.asarray(steps, dtype=np.float64).reshape(-1, 2)
    return CrowdedSpell(values[:, 0], values[:, 1])


#: Steps a crowd (an oversubscription, to a tenth) needs for its spread to count in the fade.
MIN_CROWD_STEPS = 30


def fit_fade(spells: Sequence[CrowdedSpell], full_at: float) -> tuple[float, tuple[str, ...]]:
    """How fast the race fades beyond ``full_at``, and one line per crowd it was fitted to.

    Per crowd (the steps at one oversubscription ``R``, to a tenth, with at least
    :data:`MIN_CROWD_STEPS` of them), the standard deviation of the log ratios; the fade is
    the least-squares slope of its logarithm against ``log(full_at / R)``: the race's effect
    shrinks as ``(full_at / R) ** fade``. 0 where fewer than two crowds count, or where the
    spread does not shrink with the crowd.
    """
    if not spells:
        return 0.0, ()
    ratios = np.concatenate([spell.ratios for spell in spells])
    crowds = np.round(np.concatenate([spell.oversubscription for spell in spells]), 1)
    points, lines = [], []
    for crowd in np.unique(crowds):
        logs = np.log(np.maximum(ratios[crowds == crowd], 1e-3))
        if len(logs) >= MIN_CROWD_STEPS and crowd >= full_at:
            points.append((math.log(full_at / crowd), math.log(max(float(np.std(logs)), 1e-6))))
            lines.append(
                f"R {crowd:.1f}: log spread {np.std(logs):.2f}, mean ratio "
                f"{np.exp(logs).mean():.3f} over {len(logs)} steps"
            )
    if len(points) < 2:
        return 0.0, tuple(lines)
    x, y = np.asarray(points).T
    slope = float(np.polyfit(x, y, 1)[0])
    return max(slope, 0.0), tuple(lines)


def level_multipliers(spell: CrowdedSpell, full_at: float, fade: float) -> np.ndarray:
    """The race's level multipliers behind a spell's ratios: ``1 + (ratio - 1) / s(R)`` (at
    least 0), ``s(R)`` the race's reach at each step (:func:`race_reach`; the spell's steps are
    crowded to at least ``full_at``)."""
    reach = race_reach(spell.oversubscription, np.asarray(full_at), np.asarray(fade))
    return np.maximum(1.0 + (spell.ratios - 1.0) / reach, 0.0)


def fit_race(
    series: Sequence[np.ndarray], levels: int = 3, full_at: float = 2.0, bin_s: float = 1.0
) -> RaceFit:
    """The race whose chain best explains ``series`` (see the module docstring).

    Args:
        series: per crowded spell of a job, its pace in each bin over its mean pace
            (:func:`crowded_paces`).
        levels: the chain's levels (at least 2).
        full_at: the oversubscription from which the levels apply whole (not fitted here: the
            series come from one oversubscription, at which the levels apply whole).
        bin_s: the seconds of a bin of ``series`` (holding times are in seconds).

    Raises:
        ArgumentError: too few seconds, a non-finite or negative pace, or fewer than 2 levels.
    """
    if levels < 2:
        raise ArgumentError(f"levels={levels}: expected at least 2")
    kept = [np.asarray(s, dtype=np.float64) for s in series if len(s) >= MIN_SERIES_S]
    paces = np.concatenate(kept) if kept else np.zeros(0)
    if len(paces) < levels * MIN_SERIES_S:
        raise ArgumentError(
            f"{len(paces)} bins of {bin_s:g} s of crowded pace: expected at least "
            f"{levels * MIN_SERIES_S} in series of {MIN_SERIES_S} bins or more; record longer "
            "host episodes"
        )
    if not np.isfinite(paces).all() or (paces < 0).any():
        raise ArgumentError("a pace is negative or not finite: expected units per second >= 0")
    logs = np.log(np.maximum(paces, 1e-3))
    centers = _kmeans(logs, levels)
    # Hard-EM rounds of a hidden Markov chain: each series' levels by Viterbi (a switch costs
    # what the chain's holding times say it does, so that the noise of counting whole units
    # makes no switch of its own), then the centers and the switching chance anew.
    switching = 1.0 / MIN_SERIES_S
    for _ in range(HMM_ROUNDS):
        labels = _label(logs, centers)
        spread = max(float(np.std(logs - centers[labels])), 1e-3)
        labels = np.concatenate(
            [_viterbi(piece, centers, spread, switching) for piece in _pieces(logs, kept)]
        )
        centers = np.array(
            [logs[labels == k].mean() if (labels == k).any() else centers[k] for k in range(levels)]
        )
        switches = sum(int(np.count_nonzero(np.diff(piece))) for piece in _pieces(labels, kept))
        switching = min(0.5, max(switches, 1) / len(logs))
    values = tuple(
        float(paces[labels == k].mean()) if (labels == k).any() else float(np.exp(centers[k]))
        for k in range(levels)
    )
    time_at = np.zeros(levels)
    exits = np.zeros(levels)
    moves = np.zeros((levels, levels))
    for mine in _pieces(labels, kept):
        boundaries = np.flatnonzero(np.diff(mine)) + 1
        runs = np.split(mine, boundaries)
        for index, run in enumerate(runs):
            time_at[run[0]] += len(run)
            if index + 1 < len(runs):  # the last run of a series is cut short: censored
                exits[run[0]] += 1
                moves[run[0], runs[index + 1][0]] += 1
    holding = tuple(float(bin_s * time_at[k] / max(exits[k], 1.0)) for k in range(levels))
    jumps = []
    for k in range(levels):
        row = (
            moves[k] / moves[k].sum()
            if moves[k].sum()
            else np.where(np.arange(levels) == k, 0.0, 1.0 / (levels - 1))
        )
        jumps.append(tuple(float(p) for p in row))
    model = RaceModel(
        levels=tuple(max(v, 0.0) for v in values),
        holding_s=tuple(max(h, 1.0) for h in holding),
        jumps=tuple(jumps),
        full_at=full_at,
    )
    residuals = tuple(
        f"level {k}: pace {values[k]:.3f}, {time_at[k] / len(paces):.0%} of "
        f"{len(paces) * bin_s:g} s, "
        f"held {holding[k]:.1f} s on average over {int(exits[k])} runs ended"
        for k in range(levels)
    )
    return RaceFit(model, round(len(paces) * bin_s), len(kept), residuals)


def _kmeans(logs: np.ndarray, levels: int) -> np.ndarray:
    """Ascending centers of a one-dimensional k-means of ``logs``, started at evenly spaced
    quantiles (deterministic)."""
    centers = np.quantile(logs, (np.arange(levels) + 0.5) / levels)
    labels = _label(logs, centers)
    for _ in range(MAX_ROUNDS):
        centers = np.array(
            [logs[labels == k].mean() if (labels == k).any() else centers[k] for k in range(levels)]
        )
        new = _label(logs, centers)
        if (new == labels).all():
            break
        labels = new
    return np.sort(centers)


def _label(logs: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Each value's nearest center."""
    return np.abs(logs[:, None] - centers[None, :]).argmin(axis=1)


def _pieces(values: np.ndarray, series: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``values`` (every series' seconds, one after another) cut back into the series."""
    return np.split(values, np.cumsum([len(piece) for piece in series])[:-1])


def _viterbi(logs: np.ndarray, centers: np.ndarray, spread: float, switching: float) -> np.ndarray:
    """The likeliest levels of one series: Gaussian log paces around ``centers`` (``spread``
    their deviation), a switch each second with chance ``switching`` (to any other level alike)."""
    levels = len(centers)
    emission = -0.5 * ((logs[:, None] - centers[None, :]) / spread) ** 2
    move = np.full((levels, levels), np.log(switching / (levels - 1)))
    np.fill_diagonal(move, np.log(1.0 - switching))
    score = emission[0].copy()
    back = np.zeros((len(logs), levels), dtype=np.int64)
    for second in range(1, len(logs)):
        options = score[:, None] + move
        back[second] = options.argmax(axis=0)
        score = options.max(axis=0) + emission[second]
    path = np.empty(len(logs), dtype=np.int64)
    path[-1] = int(score.argmax())
    for second in range(len(logs) - 1, 0, -1):
        path[second - 1] = back[second, path[second]]
    return path


#: What :func:`fit_race` minimises, for the race's provenance.
RACE_OBJECTIVE = (
    "per job and step where the same stock jobs crowded the worker to at least full_at: "
    "host units over the replay model's (the profile's throughput at the host's cores times "
    "the contention efficiency); the fade by least squares of the log of each crowd's log "
    "spread against log(full_at / R); the level multipliers behind the ratios at that fade; "
    "levels by k-means of their logs, then hard EM of a hidden Markov chain (Viterbi labels, "
    "levels re-estimated); holding times by censored exponential maximum likelihood; jumps by "
    "counts"
)


def recorded_episodes(folders: Sequence[Path]) -> list[EpisodeResult]:
    """Every episode recorded in ``folders``, read with its containers.

    Args:
        folders: evaluation folders (``<out>/<evaluation id>``, as ``dlsched evaluate
            --backend docker`` and the host side of ``dlsched validate`` write them), or the
            ``--out`` folder of a ``dlsched validate``, whose host episodes are taken (not its
            replay side's).

    Raises:
        ArgumentError: no episode in ``folders``, or episodes of different step lengths.
        TrackingError: a folder holds no evaluation as dlsched writes one.
    """
    episodes = []
    for folder in folders:
        if not Path(folder).is_dir():
            raise ArgumentError(
                f"--race-from {folder}: no such folder; give an evaluation folder recorded on a "
                "host, or the --out folder of a dlsched validate"
            )
        evaluations = [Path(folder)]
        if not any(Path(folder).glob(f"*/{EPISODE_FILE}")):
            # an --out folder: its evaluations whose first episode ran on a host
            evaluations = [
                path
                for path in sorted(Path(folder).iterdir())
                if (first := next(iter(sorted(path.glob(f"*/{EPISODE_FILE}"))), None))
                and recorded_backend(first.parent) != "replay"
            ]
        for evaluation in evaluations:
            episodes += [
                read_episode(path.parent, containers=True)
                for path in sorted(evaluation.glob(f"*/{EPISODE_FILE}"))
            ]
    if not episodes:
        raise ArgumentError(
            f"no episode in {', '.join(str(f) for f in folders)}: expected evaluation folders "
            "recorded on a host (dlsched evaluate --backend docker --out DIR, or the host side "
            "of dlsched validate --out DIR), or such a DIR"
        )
    steps = {episode.scenario.interval_s for episode in episodes}
    if len(steps) != 1:
        raise ArgumentError(
            f"the episodes step every {sorted(steps)} s: expected one step length; fit episodes "
            "of scenarios with the same interval_s together"
        )
    return episodes


def recorded_host_speed(folders: Sequence[Path]) -> Path | None:
    """The speed probe saved beside recorded episodes: the one ``host-speed.json`` of the
    validations in ``folders`` (``--out`` folders of ``dlsched validate``), ``None`` where
    there is none or more than one."""
    found = [path for folder in folders for path in Path(folder).glob(f"*/{HOST_SPEED_FILE}")]
    return found[0] if len(found) == 1 else None


def host_speed_of(folders: Sequence[Path], probe: Path | None = None) -> HostSpeed | None:
    """The host speed episodes recorded in ``folders`` are fitted at: the probe file
    ``probe``, else the one beside them (:func:`recorded_host_speed`); ``None`` without one.

    Raises:
        ProfileError: the probe file cannot be read.
    """
    path = probe or recorded_host_speed(folders)
    return None if path is None else read_host_speed(path)


def fit_race_to_episodes(
    episodes: Sequence[EpisodeResult],
    profile_set: str,
    recorded_in: str,
    threading: Threading = "stock",
    levels: int = 3,
    full_at: float = 2.0,
) -> RaceFit:
    """The race of ``threading`` fitted to ``episodes``, its levels divided by their long-run
    mean: the race is the spread of crowded progress around the mean that the profiles'
    crowding curves give (:mod:`.crowd_fit` fits them to the same episodes first, in
    :func:`fit_crowding_and_race`).

    Args:
        episodes: episodes of one step length (:func:`recorded_episodes`). Replay episodes fit
            too: the fit then recovers the race the replay model drew, over its mean.
        profile_set: the set the race is fitted for (a shipped name or a folder): the levels
            are measured against its profiles and contention term.
        recorded_in: where the episodes were recorded, for the race's provenance.
        threading: the threading whose jobs are fitted.
        levels: the chain's levels.
        full_at: the oversubscription from which the levels apply whole.

    Raises:
        ArgumentError: too few crowded steps.
    """
    spells = [
        spell
        for episode in episodes
        for spell in crowded_efficiencies(episode, profile_set, threading, full_at)
    ]
    fade, crowd_lines = fit_fade(spells, full_at)
    series = [level_multipliers(spell, full_at, fade) for spell in spells]
    fit = fit_race(series, levels=levels, full_at=full_at, bin_s=episodes[0].scenario.interval_s)
    mean = float(np.dot(fit.model.stationary(), fit.model.levels))
    model = dataclasses.replace(
        fit.model, levels=tuple(level / mean for level in fit.model.levels), fade=fade
    )
    scenarios = sorted({episode.scenario.name for episode in episodes})
    backends = sorted({f"{e.backend}{_options(e.backend_options)}" for e in episodes})
    provenance = FitProvenance(
        source=(
            f"{len(episodes)} episodes of {', '.join(scenarios)} (policies "
            f"{', '.join(sorted({e.policy.name for e in episodes}))}) recorded in "
            f"{recorded_in}, fitted against profile set "
            f"{Path(profile_set).name!r} by dlsched calibrate --race-from"
        ),
        host=f"the host that recorded them ({', '.join(backends)})",
        date=datetime.date.today().isoformat(),
        objective=RACE_OBJECTIVE,
        residuals=(
            *crowd_lines,
            f"fade {fade:.2f}: the slope of the log spread against log(full_at / R)",
            *fit.residuals,
            f"long-run mean level {mean:.3f} over {fit.series} series of {fit.seconds} s: the "
            "levels are divided by it, so that the profiles' crowding curves carry the mean",
        ),
    )
    return dataclasses.replace(fit, model=dataclasses.replace(model, fit=provenance))


@dataclass(frozen=True)
class CrowdingAndRace:
    """What :func:`fit_crowding_and_race` wrote.

    Attributes:
        crowding: per workload refitted, its curve.
        profiles: the profiles written.
        race: the race fitted against them.
        contention_file: the contention file it was written to.
        started_from: what a new set was started as (``None``: the folder held one already).
    """

    crowding: Mapping[str, WorkloadCrowding]
    profiles: tuple[Path, ...]
    race: RaceFit
    contention_file: Path
    started_from: str | None = None

    def report(self, directory: Path, threading: Threading) -> list[str]:
        """What was fitted into ``directory`` and written where, line by line, as
        ``dlsched calibrate --race-from`` says it."""
        lines = [] if self.started_from is None else [f"started {directory} as {self.started_from}"]
        for workload, crowding in self.crowding.items():
            lines.append(
                f"{workload}: crowded in a mix, keeps {crowding.floor:.3f} + "
                f"{1 - crowding.floor:.3f} R ** -{crowding.exponent:.2f} of its solo progress "
                f"({crowding.steps} steps)"
            )
            lines += [f"  {line}" for line in crowding.residuals]
        lines.append(f"wrote the crowding curves to {', '.join(str(p) for p in self.profiles)}")
        return lines + race_report(self.race.model, threading, self.contention_file)


def fit_crowding_and_race(
    folders: Sequence[Path],
    directory: Path,
    threading: Threading = "stock",
    speed: HostSpeed | None = None,
) -> CrowdingAndRace:
    """Fit the profile set in ``directory`` to the crowded steps of the episodes recorded in
    ``folders``, and write the fits into it: first each workload's crowding curve
    (:mod:`.crowd_fit`: the mean of its crowded progress), then the race around that mean
    (:func:`fit_race_to_episodes`). ``dlsched calibrate --race-from`` runs it.

    A ``directory`` that holds no profile yet is first made the set the episodes ran on
    (their scenario's ``profile_set``), rescaled to ``speed`` if given (the speed probe a
    validation saves as ``host-speed.json``, :mod:`.rescaled_profiles`), so that the curves
    describe the host the episodes ran on.

    Raises:
        ArgumentError: no episode in ``folders``, episodes of different step lengths or profile
            sets (with a new ``directory``), or too few crowded steps for a race.
        ProfileError: the set has no contention term, or lacks a profile it fits.
        TrackingError: a folder holds no evaluation as dlsched writes one.
    """
    episodes = recorded_episodes(folders)
    started_from = None
    if not directory.is_dir() or not any(directory.glob("*.json")):
        started_from = _start_set(directory, episodes, speed)
    _contention_file(directory)  # refused before a profile is written
    recorded_in = ", ".join(str(folder) for folder in folders)
    crowding = crowding_from_episodes(episodes, str(directory.resolve()), threading)
    source = (
        f"{len(episodes)} episodes recorded in {recorded_in}, on "
        f"{datetime.date.today().isoformat()}, by dlsched calibrate --race-from"
    )
    profiles = write_crowding(directory, crowding, source)
    race = fit_race_to_episodes(episodes, str(directory.resolve()), recorded_in, threading)
    path = write_race(directory, threading, race.model)
    return CrowdingAndRace(crowding, tuple(profiles), race, path, started_from)


def _start_set(directory: Path, episodes: Sequence[EpisodeResult], speed: HostSpeed | None) -> str:
    """Write into ``directory`` the profile set ``episodes`` ran on, rescaled to ``speed``;
    say what it is."""
    sets = sorted({episode.scenario.profile_set for episode in episodes})
    if len(sets) != 1:
        raise ArgumentError(
            f"the episodes ran on profile sets {sets}: expected one to start "
            f"{directory} from; fit episodes of one set, or copy a set into {directory} first"
        )
    if speed is None:
        directory.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(profile_set_directory(sets[0]), directory, dirs_exist_ok=True)
        return f"profile set {sets[0]!r} as it is"
    if Path(speed.profile_set).name != Path(sets[0]).name:
        raise ArgumentError(
            f"the host speed was probed against profile set {speed.profile_set!r}, the episodes "
            f"ran on {sets[0]!r}: do not match; give the host-speed.json of their validation"
        )
    write_rescaled_set(dataclasses.replace(speed, profile_set=sets[0]), directory)
    return f"profile set {sets[0]!r} rescaled to {speed.describe()}"


def race_report(race: RaceModel, threading: Threading, path: Path) -> list[str]:
    """``race``'s fit (its residuals, where it has them) and where it was written, line by
    line."""
    residuals = race.fit.residuals if race.fit else ()
    return [f"  {line}" for line in residuals] + [f"wrote the {threading} race to {path}"]


def race_spread(profile_set: str, threading: Threading = "stock") -> RaceModel:
    """``profile_set``'s race of ``threading`` with its levels divided by their long-run mean:
    the race's spread without the mean it adds, for a set whose mean contention was fitted
    elsewhere (the paper set's, to FlowCon's default-Docker makespans).

    Raises:
        ProfileError: the set has no race for ``threading``.
    """
    races = load_set_contention(profile_set).races
    if threading not in races:
        raise ProfileError(
            f"profile set {profile_set!r} has no {threading} race (it has "
            f"{', '.join(races) or 'none'}); fit one first: dlsched calibrate --race-from FOLDER "
            f"--output-dir <its folder>"
        )
    race = races[threading]
    mean = float(np.dot(race.stationary(), race.levels))
    origin = race.fit.source if race.fit else "written by hand"
    return dataclasses.replace(
        race,
        levels=tuple(level / mean for level in race.levels),
        fit=FitProvenance(
            source=f"profile set {profile_set!r}'s {threading} race ({origin}), by dlsched "
            f"calibrate --race-like {profile_set}",
            host=race.fit.host if race.fit else "",
            date=datetime.date.today().isoformat(),
            objective=f"its levels divided by their long-run mean {mean:.3f}: the same spread "
            "and switching, and this set's own mean contention",
            residuals=race.fit.residuals if race.fit else (),
        ),
    )


def _options(options: Mapping[str, str]) -> str:
    return f"[{','.join(f'{k}={v}' for k, v in sorted(options.items()))}]" if options else ""


def write_race(directory: Path, threading: Threading, model: RaceModel) -> Path:
    """Put ``model`` into the ``contention.json`` of the profile set in ``directory`` as
    ``threading``'s race, keeping everything else the file holds.

    Raises:
        ProfileError: the set has no contention file (a race multiplies the contention term),
            or the file written would not read back.
    """
    path = _contention_file(directory)
    data = json.loads(path.read_text())
    data.setdefault("races", {})[threading] = race_data(model)
    parse_contention(data, str(path))
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    temporary.replace(path)
    return path


def _contention_file(directory: Path) -> Path:
    """The contention file of the set in ``directory``.

    Raises:
        ProfileError: it has none (a race multiplies a contention term).
    """
    path = directory / CONTENTION_FILE
    if not path.is_file():
        raise ProfileError(
            f"{path} does not exist: a race multiplies a contention term; measure one first "
            f"(dlsched calibrate --contention --output-dir {directory})"
        )
    return path
