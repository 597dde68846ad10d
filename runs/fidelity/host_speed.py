"""How fast this host runs each workload, against the host its profiles were measured on.

A profile's throughput curve holds the units per second one workload made per core *on the host it
was measured on*. Hosts of the same CPU model name are not equally fast (``docs/fidelity.md``
measures two), so a replay model calibrated on one is too fast or too slow on another before any
question of sharing or contention arises. ``dlsched validate`` is about the model's shape (how jobs
share cores, contend and start), so it first measures that speed ratio and holds the host against
the profiles rescaled to it; the ratio is reported, and large ratios are warned about, since the
profiles then describe another machine.

The probe runs each workload of the scenario alone, uncapped, in one container of the workload
image: after its first unit it waits ``settle_s`` and measures its units per second and the
cores it used over ``window_s``, in ``windows`` consecutive sub-windows
(:func:`~dlsched.runs.fidelity.contention_measurement.measure_window`). The
ratio of a workload is its mean rate over its profile's at the same cores; the sub-windows'
ratios give it an interval (:mod:`~dlsched.runs.fidelity.speed_interval`), and a validation
reports the errors that interval allows beside the unscaled one
(:func:`~dlsched.runs.fidelity.rescaled_profiles.speed_noise`). A rescaled profile set
(:func:`~dlsched.runs.fidelity.rescaled_profiles.write_rescaled_set`) multiplies each probed
workload's throughput by its ratio and divides its start-up times by it (a start-up is CPU
work too); demands, noise, loss curves and the contention terms stay as measured. It is
written as an ordinary profile-set folder, so any scenario can run on it with
``profile_set: DIR``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dlsched.envs.backend import Backend
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.engine import connect
from dlsched.envs.errors import BackendError, ProfileError
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.runs.fidelity.calibration_measurement import HostDescription
from dlsched.runs.fidelity.calibration_profile import plural
from dlsched.runs.fidelity.contention_grid import JobSample
from dlsched.runs.fidelity.contention_measurement import (
    ENDLESS_ITERATIONS,
    measure_window,
    wait_for_first_units,
)
from dlsched.runs.fidelity.speed_interval import (
    SpeedInterval,
    WorkloadInterval,
    speed_interval,
)
from dlsched.runs.fidelity.validation_sides import Side

if TYPE_CHECKING:
    pass

#: Version of the ``host-speed.json`` format: 2 holds each probe's sub-window ratios (format 1,
#: read as well, has none, so no interval).
HOST_SPEED_FORMAT = 2
#: The file a probe is saved to, beside a validation's report.
HOST_SPEED_FILE = "host-speed.json"
#: Where a bracket's two probes are saved beside it (each a ``host-speed.json`` of one probe).
BRACKET_FILES = ("host-speed-before.json", "host-speed-after.json")
#: A ratio further than this from 1 is warned about: the profiles describe another machine.
SPEED_TOLERANCE = 0.10
#: Batches a service's probe sub-window holds at its profile's speed, at least.
_SERVICE_BATCHES = 2.0
#: Sub-windows a probe measures each workload over, by default.
PROBE_WINDOWS = 4
#: Seconds of one sub-window of a validation's probe (a service's: 2 batches, if longer).
PROBE_WINDOW_S = 2.0


@dataclass(frozen=True)
class WorkloadSpeed:
    """One workload alone and uncapped on this host, against its profile.

    Attributes:
        workload: the workload's name.
        unit: what it counts (``iteration`` or ``batch``).
        cores: the cores it used here.
        rate: its units per second here.
        profile_rate: its profile's units per second at ``cores``.
        windows: per probe, each consecutive sub-window's rate over ``profile_rate`` (one
            probe's, or the two of a bracket; none in a probe saved before intervals).
        window_s: seconds of one sub-window.
    """

    workload: str
    unit: str
    cores: float
    rate: float
    profile_rate: float
    windows: tuple[tuple[float, ...], ...] = ()
    window_s: float = 0.0

    @property
    def ratio(self) -> float:
        """This host's speed over the profile's host's (1: as fast)."""
        return self.rate / self.profile_rate

    def interval(self) -> SpeedInterval | None:
        """The ratios its probes allow (``None``: a probe without sub-windows)."""
        unit = 1.0 / (self.profile_rate * self.window_s) if self.window_s > 0 else 0.0
        return speed_interval(self.windows, self.ratio, self.window_s, unit)


@dataclass(frozen=True)
class HostSpeed:
    """A probe of this host's speed for the workloads of one profile set.

    Attributes:
        host: the host, as calibration describes it (name, CPU model, cores, engine).
        date: when, ``YYYY-MM-DD``.
        profile_set: the set the ratios are relative to.
        threading: how the probed workloads sized their threads.
        workloads: one per probed workload.
        probes: how many probes this speed stands for: 1, or 2 where it is the geometric mean
            of the probes before and after a validation's host episodes (:func:`between`).
    """

    host: str
    date: str
    profile_set: str
    threading: Threading
    workloads: tuple[WorkloadSpeed, ...]
    probes: int = 1

    def ratios(self) -> dict[str, float]:
        """Each probed workload's ratio, by name."""
        return {speed.workload: speed.ratio for speed in self.workloads}

    def describe(self) -> str:
        """One line: the ratio of every workload."""
        return ", ".join(f"{w.workload} x{w.ratio:.2f}" for w in self.workloads)

    def intervals(self) -> tuple[WorkloadInterval, ...]:
        """Every workload's ratio and interval."""
        return tuple(WorkloadInterval(w.workload, w.ratio, w.interval()) for w in self.workloads)

    def at_end(self, end: Literal["low", "high"]) -> HostSpeed | None:
        """This speed with every workload at one end of its interval (``None``: a workload has
        no interval)."""
        ends = []
        for speed in self.workloads:
            interval = speed.interval()
            if interval is None:
                return None
            ratio = interval.low if end == "low" else interval.high
            ends.append(dataclasses.replace(speed, rate=speed.profile_rate * ratio))
        return dataclasses.replace(self, workloads=tuple(ends))

    def which(self) -> str:
        """Which probes the speed is: one, or the mean of those around the host episodes."""
        if self.probes == 1:
            return "one probe"
        return "the geometric mean of the probes before and after the host episodes"

    def note(self) -> str:
        """What a report says of a rescale that :meth:`warning` does not warn about."""
        return (
            f"replay rescaled to this host's speed ({self.describe()} the speed of the host "
            f"profile set {self.profile_set!r} was measured on, within "
            f"{SPEED_TOLERANCE:.0%}; {self.which()}); --host-speed none holds the profiles as "
            "they are"
        )

    def warning(self, tolerance: float = SPEED_TOLERANCE) -> str | None:
        """What to tell a user whose host differs from the profiles' by more than ``tolerance``."""
        off = [w for w in self.workloads if abs(w.ratio - 1.0) > tolerance]
        if not off:
            return None
        listing = ", ".join(
            f"{w.workload} {w.rate:.3g} {plural(w.unit)}/s at {w.cores:.2f} cores against the "
            f"profile's {w.profile_rate:.3g}"
            for w in off
        )
        return (
            f"this host runs the workloads at {self.describe()} the speed of the host profile "
            f"set {self.profile_set!r} was measured on ({listing}; {self.which()}); replay was "
            "rescaled to this host's speed (--host-speed none holds the profiles as they are). "
            "For replay "
            "episodes that describe this host, calibrate it: dlsched calibrate --workload all "
            "--output-dir DIR, then profile_set: DIR"
        )


def measure_host_speed(
    scenario: Scenario,
    threading: Threading,
    window_s: float = 8.0,
    settle_s: float = 3.0,
    image: str | None = None,
    say: Callable[[str], None] | None = None,
    windows: int = PROBE_WINDOWS,
) -> HostSpeed:
    """Probe every workload of ``scenario`` alone and uncapped on its first worker's engine.

    Args:
        scenario: the scenario whose workloads (and profile set) are probed.
        threading: how the workloads size their thread pools (as the host episodes will).
        window_s: seconds each rate is measured over (a service's sub-windows: long enough for
            2 batches each at its profile's speed, if longer).
        settle_s: seconds waited after the first unit before measuring.
        image: the workload image (``None``: dlsched's own).
        say: where progress lines go (``None``: stderr).
        windows: consecutive sub-windows ``window_s`` is split into, for the interval.

    Raises:
        BackendError: no engine, a workload the image lacks, or a probe that stopped running.
    """
    endpoint = scenario.workers[0].endpoint if scenario.workers else None
    client = connect(endpoint)
    try:
        host = HostDescription.of(client)
    finally:
        client.close()
    probed = ProbedHost(
        host.describe(),
        host.cores,
        lambda: DockerBackend(image=image, workload_threading=threading),
        endpoint,
    )
    return probe_host(scenario, threading, probed, ProbeWindows(window_s, settle_s, windows), say)


@dataclass(frozen=True)
class ProbedHost:
    """What a probe runs on.

    Attributes:
        host: the host, as the probe's file names it.
        cores: its cores (the probe's one worker).
        backend: a new backend of it, closed after each workload's probe.
        endpoint: its engine (``None``: the environment's).
        profile_set: the profile set the probe's scenario names (a replay backend standing in
            for a host runs on it; Docker ignores it).
    """

    host: str
    cores: int
    backend: Callable[[], Backend]
    endpoint: str | None = None
    profile_set: str = "measured"


@dataclass(frozen=True)
class ProbeWindows:
    """How long a probe measures each workload.

    Attributes:
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after the first unit before measuring.
        windows: consecutive sub-windows ``window_s`` is split into.
    """

    window_s: float = 8.0
    settle_s: float = 3.0
    windows: int = PROBE_WINDOWS


def probe_host(
    scenario: Scenario,
    threading: Threading,
    probed: ProbedHost,
    windows: ProbeWindows,
    say: Callable[[str], None] | None = None,
) -> HostSpeed:
    """Probe every workload of ``scenario`` alone and uncapped on ``probed``, against the
    scenario's profiles (:func:`measure_host_speed` on a Docker engine).

    Raises:
        BackendError: bad windows, a workload not both in the image and in the profile set, or
            a probe that stopped running.
    """
    if not (windows.window_s > 0 and windows.settle_s >= 0 and windows.windows >= 2):
        raise BackendError(
            f"host speed probe: window_s {windows.window_s!r}, settle_s {windows.settle_s!r} "
            f"and windows {windows.windows!r} must be a positive and a non-negative number of "
            "seconds and at least 2 sub-windows (their spread is the probe's interval)"
        )
    profiles = load_profile_set(scenario.profile_set)
    names = scenario.workload_names()
    missing = [name for name in names if name not in WORKLOADS or name not in profiles]
    if missing:
        raise BackendError(
            f"host speed probe: workloads {missing} of scenario {scenario.name!r} are not both "
            f"in the workload image and in profile set {scenario.profile_set!r}; only "
            "dlsched's own workloads run on a host"
        )
    speeds = []
    for name in names:
        profile = profiles[name]
        window_s = windows.window_s / windows.windows
        if WORKLOADS[name].kind == "inference":
            # A service's rate is one over its batches' mean latency: give it several batches.
            batch_s = 1.0 / float(profile.units_per_s(profile.demand_cores))
            window_s = max(window_s, _SERVICE_BATCHES * batch_s)
        (say or _to_stderr)(
            f"[host speed] {name} alone, uncapped, {windows.windows} x {window_s:.3g} s"
        )
        samples = _probe(name, probed, windows, window_s)
        cores = statistics.fmean(sample.cores for sample in samples)
        profile_rate = float(profile.units_per_s(cores))
        speeds.append(
            WorkloadSpeed(
                workload=name,
                unit=profile.unit.value,
                cores=cores,
                rate=statistics.fmean(sample.rate for sample in samples),
                profile_rate=profile_rate,
                windows=(tuple(sample.rate / profile_rate for sample in samples),),
                window_s=window_s,
            )
        )
    return HostSpeed(
        host=probed.host,
        date=dt.date.today().isoformat(),
        profile_set=scenario.profile_set,
        threading=threading,
        workloads=tuple(speeds),
    )


def _probe(
    workload: str, probed: ProbedHost, windows: ProbeWindows, window_s: float
) -> list[JobSample]:
    """One workload alone over ``windows.windows`` consecutive sub-windows of ``window_s``."""
    inference = WORKLOADS[workload].kind == "inference"
    group = JobGroup(
        workloads=(workload,),
        count=1,
        arrival=ArrivalPattern(),
        **({"targets_s": (60.0,)} if inference else {"iterations": ENDLESS_ITERATIONS}),
    )
    scenario = Scenario(
        name="host-speed-probe",
        kind=JobKind.INFERENCE if inference else JobKind.TRAINING,
        workers=(WorkerSpec(cores=float(probed.cores), endpoint=probed.endpoint),),
        groups=(group,),
        slots_per_worker=1,
        profile_set=probed.profile_set,
    )
    specs = scenario.realise(np.random.default_rng(0))
    job_id = specs[0].job_id
    backend = probed.backend()
    episode = ControlledEpisode(backend, scenario)
    samples = []
    try:
        episode.reset(specs, np.random.default_rng(0))
        episode.place([Placement(job_id, 0, 0)])
        wait_for_first_units(episode, [job_id])
        settle_s = windows.settle_s
        for _ in range(windows.windows):
            window, _ = measure_window(episode, {job_id: 1.0}, settle_s, window_s, inference)
            samples.extend(window)
            settle_s = 0.0  # the next window follows at once
    finally:
        episode.close()
        backend.close()
    stalled = [sample for sample in samples if not (sample.rate > 0 and sample.cores > 0)]
    if stalled:
        raise BackendError(
            f"host speed probe: {workload} made {stalled[0].rate:g} units/s on "
            f"{stalled[0].cores:g} cores in a {window_s:g} s window; give it a longer "
            "window (a service needs several batches)"
        )
    return samples


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------- files


def host_speed_data(speed: HostSpeed) -> dict[str, Any]:
    """The JSON object of ``speed``, as :func:`read_host_speed` reads it."""
    return {
        "format": HOST_SPEED_FORMAT,
        "host": speed.host,
        "date": speed.date,
        "profile_set": speed.profile_set,
        "threading": speed.threading,
        "probes": speed.probes,
        "workloads": [dataclasses.asdict(w) for w in speed.workloads],
    }


def write_host_speed(speed: HostSpeed, path: Path) -> Path:
    """Save a probe (``host-speed.json``) so that a recorded validation can reuse it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(host_speed_data(speed), indent=2) + "\n", encoding="utf-8")
    return path


def read_host_speed(path: Path) -> HostSpeed:
    """A probe saved by :func:`write_host_speed` (this format, or format 1: no interval).

    Raises:
        ProfileError: the file cannot be read or is not a host speed probe.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ProfileError(f"cannot read host speed file {path}: {error}") from None
    try:
        if data["format"] not in (1, HOST_SPEED_FORMAT):
            raise ValueError(f"format {data['format']!r}, expected 1 to {HOST_SPEED_FORMAT}")
        workloads = tuple(
            WorkloadSpeed(
                workload=str(w["workload"]),
                unit=str(w["unit"]),
                cores=float(w["cores"]),
                rate=float(w["rate"]),
                profile_rate=float(w["profile_rate"]),
                # format 1 has no sub-windows
                windows=tuple(tuple(float(r) for r in probe) for probe in w.get("windows", ())),
                window_s=float(w.get("window_s", 0.0)),
            )
            for w in data["workloads"]
        )
        if (
            not all(math.isfinite(w.ratio) and w.ratio > 0 and w.cores > 0 for w in workloads)
            or not workloads
        ):
            raise ValueError("every workload needs positive, finite cores and rates")
        if not all(r > 0 and math.isfinite(r) for w in workloads for p in w.windows for r in p):
            raise ValueError("every sub-window's ratio must be positive and finite")
        probes = data.get("probes", 1)  # files saved before brackets hold one probe
        if probes not in (1, 2):
            raise ValueError(f"probes {probes!r}, expected 1 or 2")
        return HostSpeed(
            host=str(data["host"]),
            date=str(data["date"]),
            profile_set=str(data["profile_set"]),
            threading=data["threading"],
            workloads=workloads,
            probes=probes,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ProfileError(
            f"host speed file {path} is not a probe saved by dlsched validate ({error}); "
            "measure again with --host-speed measure"
        ) from None


# --------------------------------------------------------------------------------- validate


def resolve_host_speed(
    option: str | None, scenario: Scenario, reference: Side, windows: int | None = None
) -> HostSpeed | None:
    """The host speed a validation holds replay to, as ``--host-speed`` names it.

    Args:
        option: ``measure`` (probe the engine now), ``none`` (the profiles as they are), a
            ``host-speed.json`` path, or ``None``: ``measure`` against a live engine, ``none``
            against anything else.
        scenario: the scenario validated.
        reference: what replay is held against.
        windows: sub-windows of :data:`PROBE_WINDOW_S` a measured probe runs each workload
            (``None``: :data:`PROBE_WINDOWS`).

    Raises:
        BackendError: ``measure`` against a replay reference, or ``windows`` given where
            nothing is measured.
        ProfileError: the file cannot be read, or probed another profile set or fewer
            workloads than the scenario runs.
    """
    live = reference.backend == "docker" and reference.recorded is None
    choice = option if option is not None else ("measure" if live else "none")
    if windows is not None and choice != "measure":
        raise BackendError(
            f"--probe-windows {windows} applies to a probe measured now (--host-speed measure, "
            f"the default against the engine), not to --host-speed {choice}; drop it"
        )
    if choice == "none":
        return None
    if choice == "measure":
        if reference.backend != "docker":
            raise BackendError(
                f"--host-speed measure probes a Docker engine, but the reference is "
                f"{reference.label()}; give --host-speed none or a host-speed.json file"
            )
        threading: Threading = reference.options.get("workload_threading", "tuned")  # type: ignore[assignment]
        windows = windows or PROBE_WINDOWS
        return measure_host_speed(
            scenario, threading, window_s=windows * PROBE_WINDOW_S, windows=windows
        )
    path = Path(choice)
    if not path.is_file():
        raise ProfileError(
            f"--host-speed {choice!r}: expected measure, none, or a host-speed.json file that "
            "dlsched validate saved beside a report; no such file"
        )
    speed = read_host_speed(path)
    needed = scenario.workload_names()
    missing = [name for name in needed if name not in speed.ratios()]
    if speed.profile_set != scenario.profile_set or missing:
        raise ProfileError(
            f"--host-speed {path}: probed profile set {speed.profile_set!r} for "
            f"{sorted(speed.ratios())}, but scenario {scenario.name!r} runs {needed} on "
            f"{scenario.profile_set!r}; measure again with --host-speed measure"
        )
    return speed


def between(before: HostSpeed, after: HostSpeed) -> HostSpeed:
    """The host's speed between two probes of the same workloads: per workload, the geometric
    mean of the two (cores, rates and the profile's rates alike, so that the ratio is the
    geometric mean of the two ratios), with the sub-windows of both (its interval spans both).

    Raises:
        ProfileError: the probes are of different profile sets or workloads.
    """
    later = {speed.workload: speed for speed in after.workloads}
    if before.profile_set != after.profile_set or sorted(later) != sorted(before.ratios()):
        raise ProfileError(
            f"probes of {sorted(before.ratios())} on {before.profile_set!r} and of "
            f"{sorted(later)} on {after.profile_set!r} cannot be combined; probe the same "
            "workloads of the same profile set twice"
        )
    combined = []
    for first in before.workloads:
        second = later[first.workload]
        combined.append(
            WorkloadSpeed(
                workload=first.workload,
                unit=first.unit,
                cores=math.sqrt(first.cores * second.cores),
                rate=math.sqrt(first.rate * second.rate),
                profile_rate=math.sqrt(first.profile_rate * second.profile_rate),
                windows=first.windows + second.windows,
                window_s=max(first.window_s, second.window_s),
            )
        )
    return dataclasses.replace(before, date=after.date, workloads=tuple(combined), probes=2)


def drift_warning(
    before: HostSpeed, after: HostSpeed, tolerance: float = SPEED_TOLERANCE
) -> str | None:
    """What to tell a user whose host changed speed between two probes by more than ``tolerance``.

    Hosts that share their physical machine with others run the same workload at different
    speeds from one quarter of an hour to the next (``docs/fidelity.md``); a validation that
    probes before and after its host episodes says when its errors hold such a drift.
    """
    ratios = after.ratios()
    drifted = [
        (speed.workload, speed.ratio, ratios[speed.workload])
        for speed in before.workloads
        if speed.workload in ratios and abs(ratios[speed.workload] / speed.ratio - 1.0) > tolerance
    ]
    if not drifted:
        return None
    listing = ", ".join(
        f"{name} x{first:.2f} before, x{second:.2f} after ({second / first - 1.0:+.0%})"
        for name, first, second in drifted
    )
    return (
        f"this host's speed changed while its episodes ran: {listing}; replay was rescaled to "
        "the geometric mean of the two probes, but how fast the host ran during each episode is "
        "not known, so part of the errors is the host's drift: validate again when the host is "
        "steadier, or over more seeds"
    )


@dataclass
class SpeedBracket:
    """Replay rescaled to the host's speed *during* its episodes, as well as it can be known.

    A VM whose neighbours come and go runs the same workload faster or slower from one hour to
    the next (``docs/fidelity.md``), so a probe taken before the host episodes can be minutes
    stale by the time they end. The bracket probes before (:attr:`before`) and,
    once the host episodes are done, again; replay runs after, on the profiles rescaled to the
    geometric mean of the two (:func:`between`), and the report says whether the two differed
    (:func:`drift_warning`). It is the model of
    :func:`~dlsched.runs.fidelity.validation_sides.run_validation` where it is given instead of
    a :class:`~dlsched.runs.fidelity.validation_sides.Side`.

    Attributes:
        before: the probe before the host episodes.
        directory: a new folder the rescaled profile set is written into.
        measure: probes the host again (``measure_host_speed`` on the scenario).
        speed: the speed replay was rescaled to, once :meth:`after_reference` ran.
        after: the probe after the host episodes, once :meth:`after_reference` ran.
    """

    before: HostSpeed
    directory: Path
    measure: Callable[[], HostSpeed]
    speed: HostSpeed | None = None
    after: HostSpeed | None = None

    def after_reference(self) -> tuple[Side, list[str]]:
        """Probe again; replay on the rescaled set, and what the report should say of it."""
        after = self.after = self.measure()
        self.speed = between(self.before, after)
        drift = drift_warning(self.before, after)
        notes = [
            self.speed.warning() or self.speed.note(),
            drift
            or f"the host's speed after its episodes: {after.describe()}, within "
            f"{SPEED_TOLERANCE:.0%} of the probe before them ({self.before.describe()})",
        ]
        # imported here: the rescaled profiles build on this module's speeds
        from dlsched.runs.fidelity.rescaled_profiles import rescaled_model

        return rescaled_model(self.speed, self.directory), notes

    def probes(self) -> list[tuple[str, HostSpeed]]:
        """Each probe taken so far with the file it is saved to (:data:`BRACKET_FILES`), so
        that recorded host episodes can be held against either alone."""
        taken = (self.before, self.after)
        return [(name, probe) for name, probe in zip(BRACKET_FILES, taken, strict=True) if probe]


def speed_windows(speed: HostSpeed | None) -> int:
    """The sub-windows of ``speed``'s probe (:data:`PROBE_WINDOWS` where it has none), so
    that the probe after the host episodes runs as long as the one before."""
    counts = [len(probe) for w in (speed.workloads if speed else ()) for probe in w.windows]
    return min(counts, default=PROBE_WINDOWS)


def speed_bracket(
    option: str | None,
    scenario: Scenario,
    reference: Side,
    before: HostSpeed | None,
    directory: Path,
    windows: int = PROBE_WINDOWS,
) -> SpeedBracket | None:
    """A bracket around the host episodes, where the speed was measured just now.

    Args:
        option: ``--host-speed`` as given (``None``: its default).
        scenario: the scenario validated.
        reference: what replay is held against.
        before: the first probe (``None``: no rescale, nothing to bracket).
        directory: a new folder for the rescaled profile set.
        windows: sub-windows of :data:`PROBE_WINDOW_S` the probe after runs each workload.

    Returns:
        ``None`` where the speed was not measured now (a file, ``none``, a recorded
        reference): replay is then rescaled to ``before`` as it is.
    """
    live = reference.backend == "docker" and reference.recorded is None
    if before is None or not live or option not in (None, "measure"):
        return None
    return SpeedBracket(
        before,
        directory,
        lambda: measure_host_speed(
            scenario, before.threading, window_s=windows * PROBE_WINDOW_S, windows=windows
        ),
    )
