"""The local record of an evaluation: one folder per episode, written before anything is tracked.

Layout (``root`` is ``./dlsched-runs`` unless ``--out`` says otherwise)::

    <root>/<evaluation id>/
        scenario.yaml                  the scenario as it ran
        tracking.json                  where it is tracked (store, experiment, parent run)
        summary.json, summary.txt      written when the evaluation ends
        <policy>-seed<seed>/
            trajectory.csv             every step, every container (TRAJECTORY_COLUMNS)
            episode.json               identity, metrics, job outcomes, per-step aggregates
            progress.csv               every iteration or batch of every job, with its time
                                       (Docker episodes only: PROGRESS_COLUMNS)
            *.png                      the episode's plots (dlsched.runs.tracking.plots)
        .writing/<policy>-seed<seed>/  an episode being written, renamed into place once whole

The folder of an evaluation is created once and never reused, so a second evaluation cannot
overwrite a first; a finished episode is on disk whatever happens to the tracking server later,
and ``dlsched runs sync`` reads it back (:func:`read_episode`, :func:`read_tracking`) to upload
what the store missed, as ``dlsched validate --against recorded:<folder>`` does to compare. What
is read back is bounded: each file's size is checked against its limit
(:data:`MAX_RECORD_BYTES`, :data:`MAX_TRAJECTORY_BYTES`, :data:`MAX_PROGRESS_BYTES`; raised by
the environment variable each names, as the scenario limits are) before it is read.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import secrets
import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dlsched.envs.errors import TrackingError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.size_bounds import SizeBound
from dlsched.envs.telemetry import JobState, QoEClass
from dlsched.runs.evaluation.metrics import EpisodeMetrics
from dlsched.runs.evaluation.records import (
    ContainerSample,
    EpisodeResult,
    JobOutcome,
    PolicyIdentity,
    StepRecord,
    to_jsonable,
)

_T = TypeVar("_T")

#: Default parent folder of local evaluation records, relative to the working directory.
DEFAULT_OUT = Path("dlsched-runs")


def unique_id(prefix: str, stamp_format: str = "%Y%m%d-%H%M%S") -> str:
    """An id for the folder of an evaluation (or training, validation, reproduction) under
    :data:`DEFAULT_OUT` and its MLflow run: ``<prefix>-<UTC date-time>-<6 random hex digits>``,
    the date-time as ``stamp_format`` writes it; ids of one prefix sort by time, and two runs
    started in the same second still differ."""
    stamp = datetime.now(UTC).strftime(stamp_format)
    return f"{prefix}-{stamp}-{secrets.token_hex(3)}"


TRAJECTORY_FILE = "trajectory.csv"
EPISODE_FILE = "episode.json"
SCENARIO_FILE = "scenario.yaml"
#: Where an episode's folder is written before it is renamed into place, whole.
WRITING_DIR = ".writing"
TRACKING_FILE = "tracking.json"
PROGRESS_FILE = "progress.csv"

MAX_RECORD_BYTES = SizeBound(
    "MAX_RECORD_BYTES", 256 << 20, "bytes in a record read back (episode.json, tracking.json)"
)
"""An episode's record (its steps' aggregates and jobs) or a folder's tracking record: 256 MiB,
an episode of a million steps (a paper's episode records a few hundred kB); read whole, it
takes about ten times that in memory."""
MAX_TRAJECTORY_BYTES = SizeBound(
    "MAX_TRAJECTORY_BYTES", 512 << 20, "bytes in an episode's trajectory table (trajectory.csv)"
)
"""An episode's table of every container at every step: 512 MiB, about three million rows (a
paper's episode writes a few MB); read back as one record per row, or uploaded by ``dlsched runs
sync``."""
MAX_PROGRESS_BYTES = SizeBound(
    "MAX_PROGRESS_BYTES", 512 << 20, "bytes in an episode's progress events (progress.csv)"
)
"""An episode's every iteration and batch with its time: 512 MiB, about 15 million events (an
episode of docker-training-4 writes about 60 kB)."""
#: Columns of ``progress.csv``: one row per iteration or batch of a job.
PROGRESS_COLUMNS: tuple[str, ...] = ("job_id", "unit", "time_s", "count")

#: Columns of ``trajectory.csv``: the step, then one :class:`ContainerSample` field each.
TRAJECTORY_COLUMNS: tuple[str, ...] = (
    "step",
    "time_s",
    "job_id",
    "workload",
    "state",
    "worker",
    "limit",
    "limit_cores",
    "cpu_usage",
    "latency_s",
    "target_s",
    "tolerance",
    "qoe_class",
    "loss",
    "iterations",
    "throttle_ratio",
)


@dataclass(frozen=True)
class TrackingRecord:
    """Where a local folder (an evaluation's or a training's) is tracked: ``tracking.json``.

    Attributes:
        kind: ``evaluation`` or ``training``.
        tracking_uri: the MLflow store.
        experiment_id: the experiment.
        run_id: the evaluation's parent run, or the training's run.
        name: the evaluation or training id.
    """

    kind: str
    tracking_uri: str
    experiment_id: str
    run_id: str
    name: str

    def write(self, folder: Path) -> None:
        (folder / TRACKING_FILE).write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")


def read_tracking(folder: Path) -> TrackingRecord:
    """The :class:`TrackingRecord` of a local folder.

    Raises:
        TrackingError: the folder has none (it was run with --no-tracking, or is no dlsched
            folder).
    """
    path = folder / TRACKING_FILE
    try:
        data = json.loads(_bounded(path, MAX_RECORD_BYTES).read_text())
        return TrackingRecord(**data)
    except FileNotFoundError:
        raise TrackingError(
            f"{folder} has no {TRACKING_FILE}: it is not the local folder of a tracked dlsched "
            "evaluation or training (those are under dlsched-runs/, or where --out said)"
        ) from None
    except (ValueError, TypeError) as error:
        raise TrackingError(f"{path} is not a dlsched tracking record: {error}") from None


def _bounded(path: Path, limit: SizeBound) -> Path:
    """``path``, once its size is found within ``limit`` (without reading it).

    Raises:
        TrackingError: it is larger, naming its size, the limit and the variable that raises it.
        FileNotFoundError: there is no such file.
    """
    size = path.stat().st_size
    if limit.exceeded(size):
        raise TrackingError(
            f"{path} has {size:,} bytes: expected {limit.expected()}. dlsched wrote no such "
            "file: check that it is the file of a dlsched evaluation"
        )
    return path


def episode_name(policy: PolicyIdentity, seed: int) -> str:
    """The folder and run name of one episode: ``<policy>-seed<seed>``."""
    return f"{policy.name}-seed{seed}"


@dataclass(frozen=True)
class EvaluationFolder:
    """The local folder of one evaluation.

    Attributes:
        path: ``<root>/<evaluation id>``.
    """

    path: Path

    @classmethod
    def of(cls, root: Path, evaluation_id: str) -> EvaluationFolder:
        """The folder of evaluation ``evaluation_id`` under ``root`` (not created yet)."""
        return cls(root / evaluation_id)

    def create(self) -> None:
        """Create the folder; it must not exist yet, so no evaluation overwrites another."""
        try:
            self.path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise TrackingError(
                f"local evaluation folder {self.path} already exists; evaluation ids are unique, "
                "so another process is writing the same id: rerun, or pass another --out"
            ) from None
        except OSError as error:
            raise TrackingError(
                f"cannot create the local evaluation folder {self.path}: {error}; pass a "
                "writable folder with --out"
            ) from None

    def episode_dir(self, policy: PolicyIdentity, seed: int) -> Path:
        return self.path / episode_name(policy, seed)

    def write_tracking(self, record: TrackingRecord) -> None:
        record.write(self.path)

    def episode_dirs(self) -> list[Path]:
        """The folders of the episodes written so far, by name."""
        return sorted(path.parent for path in self.path.glob(f"*/{EPISODE_FILE}"))

    def write_scenario(self, scenario_yaml: str) -> Path:
        path = self.path / SCENARIO_FILE
        path.write_text(scenario_yaml)
        return path

    def write_episode(self, result: EpisodeResult, scenario_yaml: str) -> Path:
        """Write an episode's trajectory, record and scenario (its YAML text); return its folder.

        Raises:
            TrackingError: the folder cannot be written (a full disk, say), naming it and the fix.
        """
        folder = self.episode_dir(result.policy, result.seed)
        # written aside and renamed into place: a process killed in the middle leaves no episode
        # folder that lacks a file (`dlsched runs sync` would refuse the whole evaluation)
        written = self.path / WRITING_DIR / folder.name
        try:
            written.mkdir(parents=True, exist_ok=False)
            write_trajectory(result, written / TRAJECTORY_FILE)
            if result.progress_traces:
                write_progress(result.progress_traces, written / PROGRESS_FILE)
            (written / EPISODE_FILE).write_text(json.dumps(episode_record(result), indent=1))
            (written / SCENARIO_FILE).write_text(scenario_yaml)
            written.rename(folder)  # fails if ``folder`` holds anything: nothing is overwritten
            written.parent.rmdir()
        except OSError as error:
            # the part written is no episode (sync reads none of it) and holds the space a full
            # disk lacks: it goes, and so does the folder it was written in if it is empty
            shutil.rmtree(written, ignore_errors=True)
            with contextlib.suppress(OSError):
                written.parent.rmdir()
            raise TrackingError(
                f"cannot write episode {folder.name} to {folder.resolve()}: {error}; the "
                "episodes written before it are there. Free space there, or pass another --out"
            ) from None
        return folder


def write_trajectory(result: EpisodeResult, path: Path) -> None:
    """Write the trajectory table: one row per step and container that had arrived."""
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(TRAJECTORY_COLUMNS)
        for step in result.steps:
            for sample in step.containers:
                writer.writerow(
                    [step.step, repr(step.time_s)]
                    + [_cell(getattr(sample, column)) for column in TRAJECTORY_COLUMNS[2:]]
                )


def write_progress(traces: tuple[ProgressTrace, ...], path: Path) -> None:
    """Write every job's progress events, job after job (:data:`PROGRESS_COLUMNS`)."""
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(PROGRESS_COLUMNS)
        for trace in traces:
            writer.writerows(
                (trace.job_id, trace.unit, repr(time_s), count)
                for time_s, count in zip(trace.times_s.tolist(), trace.counts.tolist(), strict=True)
            )


def read_progress(path: Path, truncated: frozenset[str]) -> tuple[ProgressTrace, ...]:
    """The traces :func:`write_progress` wrote, in its order (``truncated``: the jobs whose
    traces were cut at :data:`~dlsched.envs.progress_trace.MAX_TRACE_EVENTS`)."""
    times: defaultdict[str, list[float]] = defaultdict(list)
    counts: defaultdict[str, list[int]] = defaultdict(list)
    units: dict[str, str] = {}
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            job_id = row["job_id"]
            units.setdefault(job_id, row["unit"])
            times[job_id].append(float(row["time_s"]))
            counts[job_id].append(int(row["count"]))
    return tuple(
        ProgressTrace(
            job_id,
            unit,
            np.asarray(times[job_id], dtype=np.float64),
            np.asarray(counts[job_id], dtype=np.int64),
            job_id in truncated,
        )
        for job_id, unit in units.items()
    )


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def episode_record(result: EpisodeResult) -> dict[str, object]:
    """The JSON record of an episode: everything but the per-container rows."""
    return {
        "policy": {"name": result.policy.name, "params": dict(result.policy.params)},
        "scenario": result.scenario.name,
        "scenario_hash": result.scenario.content_hash(),
        "backend": result.backend,
        "backend_options": dict(result.backend_options),
        "seed": result.seed,
        "incidents": list(result.incidents),
        "progress_truncated": [trace.job_id for trace in result.progress_traces if trace.truncated],
        "metrics": to_jsonable(result.metrics),
        "jobs": [{**to_jsonable(job), "completion_s": job.completion_s} for job in result.jobs],
        "steps": [
            {
                **{
                    f.name: getattr(step, f.name)
                    for f in dataclasses.fields(step)
                    if f.name != "containers"
                },
                "satisfied_fraction": step.satisfied_fraction,
            }
            for step in result.steps
        ],
    }


def read_trajectory(path: Path) -> dict[int, tuple[ContainerSample, ...]]:
    """The rows of a trajectory table (:func:`write_trajectory`), by step, in table order."""
    rows: dict[int, list[ContainerSample]] = {}
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            rows.setdefault(int(row["step"]), []).append(
                ContainerSample(
                    job_id=row["job_id"],
                    workload=row["workload"],
                    state=JobState(row["state"]),
                    worker=_optional(row["worker"], int),
                    limit=float(row["limit"]),
                    limit_cores=float(row["limit_cores"]),
                    cpu_usage=float(row["cpu_usage"]),
                    latency_s=_optional(row["latency_s"], float),
                    target_s=_optional(row["target_s"], float),
                    tolerance=float(row["tolerance"]),
                    qoe_class=_optional(row["qoe_class"], QoEClass),
                    loss=_optional(row["loss"], float),
                    iterations=int(row["iterations"]),
                    # a table written before the column was added has none
                    throttle_ratio=_optional(row.get("throttle_ratio") or "", float),
                )
            )
    return {step: tuple(samples) for step, samples in rows.items()}


def _optional(cell: str, parse: Callable[[str], _T]) -> _T | None:
    return None if cell == "" else parse(cell)


@dataclass(frozen=True)
class EpisodeFiles:
    """The files of one recorded episode, each found within its limit.

    Attributes:
        record: ``episode.json``.
        trajectory: ``trajectory.csv``.
        progress: ``progress.csv`` (``None``: the episode recorded no progress events).
    """

    record: Path
    trajectory: Path
    progress: Path | None


def episode_files(folder: Path) -> EpisodeFiles:
    """The files of the episode in ``folder``, once each is found within its limit (none is
    read): a reader of many episodes checks them all first.

    Raises:
        TrackingError: a file is missing or larger than its limit.
    """
    progress = folder / PROGRESS_FILE
    try:
        return EpisodeFiles(
            _bounded(folder / EPISODE_FILE, MAX_RECORD_BYTES),
            _bounded(folder / TRAJECTORY_FILE, MAX_TRAJECTORY_BYTES),
            _bounded(progress, MAX_PROGRESS_BYTES) if progress.exists() else None,
        )
    except FileNotFoundError as error:
        raise TrackingError(
            f"episode folder {folder} lacks {Path(str(error.filename)).name}: dlsched writes "
            f"{EPISODE_FILE}, {TRAJECTORY_FILE} and {SCENARIO_FILE} in every episode's folder"
        ) from None


def recorded_backend(folder: Path) -> str:
    """The backend the episode in ``folder`` ran on, read from its record alone (its scenario
    need not load here: a replay side's profile set may be gone).

    Raises:
        TrackingError: the record is missing, larger than its limit, or not dlsched's.
    """
    record = episode_files(folder).record
    try:
        return str(json.loads(record.read_text())["backend"])
    except (ValueError, KeyError, TypeError) as error:
        raise TrackingError(
            f"{record} holds no dlsched episode as dlsched writes one ({type(error).__name__}: "
            f"{error})"
        ) from None


def read_episode(folder: Path, containers: bool = False) -> EpisodeResult:
    """An episode read back from its folder (what :meth:`EvaluationFolder.write_episode` wrote).

    Every file's size is checked first, ``trajectory.csv``'s and ``progress.csv``'s too when
    they are not read here (the caller uploads them: ``dlsched runs sync``).

    Args:
        folder: the episode's folder (``<evaluation>/<policy>-seed<seed>``).
        containers: also read the per-container rows of ``trajectory.csv`` into each step's
            ``containers``, and the progress events of ``progress.csv`` (where the episode
            has them); without it the steps carry their aggregates only.

    Raises:
        TrackingError: a file is missing, larger than its limit, or not what dlsched writes.
        ScenarioError: its scenario file is not a valid scenario.
    """
    files = episode_files(folder)
    scenario = load_scenario(str(folder / SCENARIO_FILE))
    try:
        record = json.loads(files.record.read_text())
        rows = read_trajectory(files.trajectory) if containers else {}
        traces = (
            read_progress(files.progress, frozenset(record.get("progress_truncated", ())))
            if containers and files.progress is not None
            else ()
        )
        return _episode_result(record, scenario, rows, traces)
    except (ValueError, KeyError, TypeError) as error:
        raise TrackingError(
            f"episode folder {folder} holds no dlsched episode as dlsched writes one "
            f"({type(error).__name__}: {error})"
        ) from None


def _episode_result(
    record: dict[str, Any],
    scenario: Scenario,
    rows: dict[int, tuple[ContainerSample, ...]],
    traces: tuple[ProgressTrace, ...],
) -> EpisodeResult:
    step_fields = {f.name for f in dataclasses.fields(StepRecord)} - {"containers"}
    # a field a record written by an earlier version lacks keeps its default (what the CPU and
    # the decisions cost were not recorded before)
    steps = tuple(
        StepRecord(
            **{key: step[key] for key in step_fields if key in step},
            containers=rows.get(step["step"], ()),
        )
        for step in record["steps"]
    )
    jobs = tuple(
        JobOutcome(job["job_id"], job["workload"], job["arrival_s"], job["completed_s"])
        for job in record["jobs"]
    )
    return EpisodeResult(
        policy=PolicyIdentity(
            record["policy"]["name"], tuple(sorted(record["policy"]["params"].items()))
        ),
        scenario=scenario,
        backend=record["backend"],
        seed=int(record["seed"]),
        steps=steps,
        jobs=jobs,
        metrics=EpisodeMetrics(**record["metrics"]),
        backend_options=record["backend_options"],
        incidents=tuple(record.get("incidents", ())),
        progress_traces=traces,
    )
