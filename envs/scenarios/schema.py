"""The scenario file format, defined once: the shape of a scenario YAML file as pydantic models.

This module is the single definition of what a scenario file may hold. From it come:

- the JSON Schema shipped beside it (``scenario.schema.json``, printed by ``dlsched scenarios
  --schema``), which editors use to complete and check scenario files: a file whose first line is
  ``# yaml-language-server: $schema=<path to the schema>`` is checked as it is typed;
- the validation of every file :func:`~dlsched.envs.scenarios.file_format.load_scenario` reads:
  types, ranges, required and unknown fields, the arrival kinds and the fields each takes;
- the words of its error messages: every value type carries an :class:`Expected` saying what a
  value must be (``"a number of seconds > 0"``), and every field a description, which is both the
  editor's hover text and what a missing field's message asks for.

Rules that relate one field to another elsewhere in the file (fields only one scenario kind uses,
workload names of the profile set, worker indices, arrivals before the horizon) are not the
schema's: :mod:`.rules` checks them. The models here only describe the file; the rest of dlsched
works with the dataclasses of :mod:`.model`, which :meth:`ScenarioFile.to_scenario` builds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from dlsched.envs.scenarios import model
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.size_bounds import MAX_NAME_LENGTH, MAX_PATH_LENGTH, MAX_TEXT_LENGTH
from dlsched.envs.workloads.cpu_quota import Threading

SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")
"""The JSON Schema of scenario files, as :func:`scenario_json_schema` generates it."""

RULE_ERROR = "scenario_rule"
"""The pydantic error type of the rules the models check themselves (``low <= high``); the
error's message is what was expected."""

# The dataclasses' own defaults, so that the file's optional fields cannot drift from them.
_DEFAULTS = model.Scenario(name="defaults", kind=JobKind.INFERENCE, workers=(), groups=())
_GROUP_DEFAULTS = model.JobGroup(workloads=())
_T = TypeVar("_T")


@dataclass(frozen=True)
class Expected:
    """What a value of the file must be, as an error message says it.

    Attributes:
        text: the expectation, e.g. ``"a number of seconds > 0"``.
        misplaced: on a union told apart by a ``kind`` field, what to say of a field that another
            kind takes; ``{tag}`` is this kind, ``{keys}`` the fields it takes.
    """

    text: str
    misplaced: str = ""


def _refuse_null(value: object) -> object:
    if value is None:
        raise PydanticCustomError("null", "a value, not null")
    return value


Omittable = Annotated[_T | None, BeforeValidator(_refuse_null)]
"""A field that may be left out (it is then ``None``) but, if given, holds a ``_T``: an empty
``key:`` in YAML is refused rather than taken for "left out"."""

# --- values ----------------------------------------------------------------------------------

_FINITE = Field(allow_inf_nan=False)
Seconds = Annotated[float, Field(gt=0), _FINITE, Expected("a number of seconds > 0")]
SecondsFromZero = Annotated[float, Field(ge=0), _FINITE, Expected("a number of seconds >= 0")]
Cores = Annotated[float, Field(gt=0), _FINITE, Expected("a number of cores > 0")]
Loss = Annotated[float, Field(gt=0), _FINITE, Expected("a number of loss > 0")]
Tolerance = Annotated[
    float, Field(gt=0, lt=1), _FINITE, Expected("a number in (0, 1), both excluded")
]
PositiveInt = Annotated[int, Field(ge=1), Expected("a whole number >= 1")]
# 64 MiB is far below what torch needs, but a user may try; 1 TiB keeps bytes in the engine's range.
MemoryMiB = Annotated[
    int, Field(ge=64, le=2**20), Expected("a whole number of MiB from 64 to 1048576 (1 TiB)")
]
# The kernel's own bound on pids (pid_max) is 4194304.
Pids = Annotated[
    int, Field(ge=8, le=2**22), Expected("a whole number of processes from 8 to 4194304")
]
Index = Annotated[int, Field(ge=0), Expected("a whole number >= 0")]
Text = Annotated[
    str,
    Field(max_length=MAX_TEXT_LENGTH),
    Expected("a string (quote it if it contains ': ' or starts with a symbol)"),
]
Name = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_NAME_LENGTH),
    Expected(
        "a name of letters, digits, '.', '_' and '-' starting with a letter or digit, "
        "e.g. my-burst-test"
    ),
]
ProfileSet = Annotated[
    str,
    Field(min_length=1, max_length=MAX_PATH_LENGTH),
    Expected("a string: a profile set's name (e.g. paper, measured) or a folder's path"),
]
Endpoint = Annotated[
    str,
    Field(pattern="://", max_length=MAX_TEXT_LENGTH),
    Expected(
        "a Docker endpoint URL such as tcp://host:2375, ssh://user@host or "
        "unix:///var/run/docker.sock (leave it out for the local engine)"
    ),
]
# Kinds are written as their values; strict validation would want the enum members themselves.
Kind = Annotated[JobKind, Strict(False)]

_SECONDS_LIST = "a non-empty list of numbers of seconds, e.g. [20, 40]"


_LOSS_TARGETS = (
    "two losses [first tier, second tier], the first one larger (reached first), e.g. [0.5, 0.2]"
)


def _first_larger(losses: list[float]) -> list[float]:
    if losses[0] <= losses[1]:
        raise PydanticCustomError(RULE_ERROR, _LOSS_TARGETS)
    return losses


LossTargets = Annotated[
    list[Loss],
    Field(min_length=2, max_length=2),
    AfterValidator(_first_larger),
    Expected(_LOSS_TARGETS),
]


def _container(value: object) -> str | None:
    """The tag of a union of a mapping and a list or a number: the shape ``value`` has."""
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, int):
        return "number"
    return None


class _FileMapping(BaseModel):
    """A mapping of a scenario file: only its own fields, each of exactly its type.

    The docstrings of its subclasses are the descriptions of their JSON Schema, which editors
    show as they are: plain text, no markup."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- workers ---------------------------------------------------------------------------------


class WorkerPool(_FileMapping):
    """Identical workers, e.g. {count: 4, cores: 8}."""

    count: PositiveInt = Field(default=1, description="how many identical workers (default 1)")
    cores: Cores = Field(description="the worker's CPU cores, e.g. 8")
    endpoint: Omittable[Endpoint] = Field(
        default=None,
        description="the Docker endpoint of the workers (Docker backend); leave it out for the "
        "local engine",
    )

    def to_workers(self) -> tuple[model.WorkerSpec, ...]:
        return (model.WorkerSpec(cores=self.cores, endpoint=self.endpoint),) * self.count


class Worker(_FileMapping):
    """One worker of a list, e.g. {cores: 16, endpoint: "tcp://host:2375"}."""

    cores: Cores = Field(description="the worker's CPU cores, e.g. 8")
    endpoint: Omittable[Endpoint] = Field(
        default=None,
        description="the worker's Docker endpoint (Docker backend); leave it out for the local "
        "engine",
    )


_WORKERS = "a mapping {count: N, cores: C} or a non-empty list of {cores: C, endpoint: URL}"
Workers = Annotated[
    Annotated[WorkerPool, Tag("mapping"), Expected(_WORKERS)]
    | Annotated[
        list[Annotated[Worker, Expected("a mapping {cores: C[, endpoint: URL]}")]],
        Field(min_length=1),
        Tag("list"),
        Expected(_WORKERS),
    ],
    Discriminator(_container),
    Expected(_WORKERS),
]


def worker_count(workers: WorkerPool | list[Worker]) -> int:
    """How many workers a ``workers:`` field describes (without building them)."""
    return workers.count if isinstance(workers, WorkerPool) else len(workers)


def to_workers(workers: WorkerPool | list[Worker]) -> tuple[model.WorkerSpec, ...]:
    """The workers a ``workers:`` field describes."""
    if isinstance(workers, WorkerPool):
        return workers.to_workers()
    return tuple(
        model.WorkerSpec(cores=worker.cores, endpoint=worker.endpoint) for worker in workers
    )


# --- job counts and targets ------------------------------------------------------------------


class _Range(_FileMapping):
    """Bounds of a uniform draw, ``low <= high``; subclasses type them."""

    low: Any
    high: Any

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise PydanticCustomError(RULE_ERROR, "low <= high")
        return self


class CountRange(_Range):
    """A number of jobs drawn per episode, uniformly from [low, high]."""

    low: PositiveInt = Field(description="a whole number >= 1, the fewest jobs")
    high: PositiveInt = Field(description="a whole number >= 1, the most jobs")


#: A whole number, or a range of them of type ``_T`` (a :class:`_Range` of whole numbers).
WholeOrRange = Annotated[
    Annotated[PositiveInt, Tag("number")]
    | Annotated[_T, Tag("mapping"), Expected("a range {low: L, high: H}")],
    Discriminator(_container),
    Expected("a whole number >= 1 or a range {low: L, high: H}"),
]
Count = WholeOrRange[CountRange]


class IterationRange(_Range):
    """Training iterations drawn per job, uniformly from [low, high]."""

    low: PositiveInt = Field(description="a whole number >= 1, the fewest iterations")
    high: PositiveInt = Field(description="a whole number >= 1, the most iterations")


Iterations = WholeOrRange[IterationRange]


def to_whole_or_range(value: int | CountRange | IterationRange) -> int | model.IntRange:
    """The number, or the range of whole numbers, a ``count:`` or ``iterations:`` field
    describes."""
    if isinstance(value, CountRange | IterationRange):
        return model.IntRange(low=value.low, high=value.high)
    return value


class TargetRange(_Range):
    """Inference latency targets drawn per job, uniformly from [low, high] seconds."""

    low: Seconds = Field(description="the lowest target in seconds, > 0")
    high: Seconds = Field(description="the highest target in seconds, > 0")


# --- arrivals --------------------------------------------------------------------------------

_START = "seconds from the start of the episode to the first arrival (default 0)"


class _Arrival(_FileMapping):
    """An arrival pattern: a kind and the fields of :class:`~.model.ArrivalPattern` it takes."""

    def to_pattern(self) -> model.ArrivalPattern:
        fields = self.model_dump()
        kind = model.ArrivalKind(fields.pop("kind"))
        if "times_s" in fields:
            fields["times_s"] = tuple(fields["times_s"])
        return model.ArrivalPattern(kind=kind, **fields)


class BurstArrival(_Arrival):
    """Every job of the group arrives at start_s."""

    kind: Literal["burst"]
    start_s: SecondsFromZero = Field(default=0.0, description=_START)


class FixedArrival(_Arrival):
    """One job every every_s seconds from start_s."""

    kind: Literal["fixed"]
    every_s: Seconds = Field(description="the seconds between two arrivals, a number > 0")
    start_s: SecondsFromZero = Field(default=0.0, description=_START)


class RandomArrival(_Arrival):
    """Arrivals drawn uniformly from [start_s, start_s + window_s] with the episode's seed."""

    kind: Literal["random"]
    window_s: Seconds = Field(
        description="the length in seconds of the window arrivals are drawn from, > 0"
    )
    start_s: SecondsFromZero = Field(default=0.0, description=_START)


class ExplicitArrival(_Arrival):
    """The listed arrival times, one per job."""

    kind: Literal["explicit"]
    times_s: Annotated[list[SecondsFromZero], Field(min_length=1), Expected(_SECONDS_LIST)] = Field(
        description="the list of arrival times in seconds, one per job"
    )


Arrival = Annotated[
    BurstArrival | FixedArrival | RandomArrival | ExplicitArrival,
    Field(discriminator="kind"),
    Expected(
        "a mapping such as {kind: burst} or {kind: fixed, every_s: 50}",
        misplaced="not used by arrival kind {tag} (it takes {keys}); remove it or change the kind",
    ),
]

# --- job groups ------------------------------------------------------------------------------

INFERENCE_ONLY = ("targets_s", "target_range_s", "tolerance")
"""Job group fields only inference scenarios take."""
TRAINING_ONLY = ("iterations", "loss_targets")
"""Job group fields only training scenarios take."""


class JobGroupFile(_FileMapping):
    """A template for one or more jobs: workloads (or workload) is required, and inference
    groups need targets_s or target_range_s."""

    workloads: Omittable[
        Annotated[
            list[Text],
            Field(min_length=1),
            Expected("a non-empty list of workload names, e.g. [resnet50, vgg16]"),
        ]
    ] = Field(
        default=None,
        description="a list of workload names, e.g. [resnet50] (or workload: resnet50); with "
        "more than one, each job draws one",
    )
    workload: Omittable[Text] = Field(
        default=None, description="one workload name, e.g. resnet50 (or workloads: [...])"
    )
    count: Count = Field(
        default=1,
        description="how many jobs: a whole number, or {low: L, high: H} drawn per episode "
        "(default 1)",
    )
    arrival: Omittable[Arrival] = Field(
        default=None,
        description="when the jobs arrive: {kind: burst|fixed|random|explicit, ...} (default: "
        "all at 0 s)",
    )
    arrival_choices: Omittable[
        Annotated[
            list[Arrival],
            Field(min_length=1),
            Expected(
                "a non-empty list of arrival patterns, e.g. [{kind: burst}, {kind: fixed, "
                "every_s: 50}]"
            ),
        ]
    ] = Field(
        default=None,
        description="arrival patterns of which each episode draws one (instead of arrival)",
    )
    targets_s: Omittable[Annotated[list[Seconds], Field(min_length=1), Expected(_SECONDS_LIST)]] = (
        Field(
            default=None,
            description="inference: latency targets in seconds, one per job (cycled over the jobs)",
        )
    )
    target_range_s: Omittable[Annotated[TargetRange, Expected("a mapping {low: L, high: H}")]] = (
        Field(
            default=None,
            description="inference: targets drawn per job from {low: L, high: H} seconds (instead "
            "of targets_s)",
        )
    )
    tolerance: Tolerance = Field(
        default=_GROUP_DEFAULTS.tolerance,
        description="inference: the satisfaction tolerance alpha (DQoES Section IV, Eq. 2)",
    )
    iterations: Omittable[Iterations] = Field(
        default=None,
        description="training: iterations of each job, a whole number or {low: L, high: H} "
        "drawn per job (default: the workload profile's own)",
    )
    worker: Omittable[Index] = Field(
        default=None,
        description="the index of the worker every job of the group runs on (default: placed)",
    )
    loss_targets: Omittable[LossTargets] = Field(
        default=None, description="training: TRADL's two-tier loss targets, e.g. [0.5, 0.2]"
    )

    def workload_names(self) -> tuple[str, ...]:
        """The group's workloads, whichever of ``workloads`` and ``workload`` gives them."""
        if self.workloads is not None:
            return tuple(self.workloads)
        return (self.workload,) if self.workload is not None else ()

    def to_group(self) -> model.JobGroup:
        """The :class:`JobGroup` this group describes (its fields checked by :mod:`.rules`)."""
        targets = self.target_range_s
        return model.JobGroup(
            workloads=self.workload_names(),
            count=to_whole_or_range(self.count),
            arrival=self.arrival.to_pattern()
            if self.arrival is not None
            else model.ArrivalPattern(),
            arrival_choices=tuple(choice.to_pattern() for choice in self.arrival_choices or ()),
            targets_s=tuple(self.targets_s or ()),
            target_range_s=model.FloatRange(low=targets.low, high=targets.high)
            if targets
            else None,
            tolerance=self.tolerance,
            iterations=None if self.iterations is None else to_whole_or_range(self.iterations),
            worker=self.worker,
            loss_targets=(
                (self.loss_targets[0], self.loss_targets[1]) if self.loss_targets else None
            ),
        )


# --- the scenario ----------------------------------------------------------------------------


class ScenarioFile(_FileMapping):
    """A dlsched scenario: the workers of a host or cluster and the jobs that arrive on them
    (`dlsched scenarios NAME` shows the shipped ones)."""

    name: Name = Field(
        description="the scenario's name, e.g. my-burst-test (a shipped scenario's is its file "
        "name)"
    )
    description: Text = Field(default="", description="one line saying what it is")
    source: Text = Field(
        default="", description="where it comes from (paper, section, figures); empty for yours"
    )
    kind: Kind = Field(
        description=f"one of {', '.join(JobKind)}: whether the jobs train models (they end) or "
        f"serve them (until the horizon)"
    )
    interval_s: Seconds = Field(
        default=_DEFAULTS.interval_s,
        description="seconds one environment step covers (the papers' IV)",
    )
    horizon_s: Seconds = Field(
        description="the episode length in seconds, e.g. 600: an episode is truncated then"
    )
    slots_per_worker: PositiveInt = Field(
        default=_DEFAULTS.slots_per_worker,
        description="positions per worker in the observation and action arrays",
    )
    profile_set: ProfileSet = Field(
        default=_DEFAULTS.profile_set,
        description="the set of replay workload profiles (its workloads are the ones a job may "
        "name)",
    )
    workload_threading: Omittable[Threading] = Field(
        default=None,
        description="how the workloads size their thread pools on the Docker backend (see "
        "dlsched.envs.workloads.cpu_quota); the replay backend checks it against its profiles' "
        "threading",
    )
    migration_cost_s: SecondsFromZero = Field(
        default=_DEFAULTS.migration_cost_s,
        description="seconds a migrated job is paused (replay backend)",
    )
    container_memory_mb: MemoryMiB = Field(
        default=_DEFAULTS.container_memory_mb,
        description="memory (RAM, no swap) each job's container may use on the Docker backend, "
        "in MiB; a job over it is killed (out of memory). The workloads of the image peak at "
        "about 1.2 GiB",
    )
    container_pids: Pids = Field(
        default=_DEFAULTS.container_pids,
        description="processes and threads each job's container may run on the Docker backend "
        "(a workload runs about one thread per core)",
    )
    workers: Workers = Field(
        description="the workers, e.g. {count: 1, cores: 8} or [{cores: 8}, {cores: 16}]"
    )
    jobs: Annotated[
        list[
            Annotated[JobGroupFile, Expected("a job group: a mapping with workloads, count, ...")]
        ],
        Field(min_length=1),
        Expected("a non-empty list of job groups (each a mapping)"),
    ] = Field(description="a list of job groups, each with workloads, count, arrival, ...")

    def to_scenario(self) -> model.Scenario:
        """The :class:`Scenario` this file describes (its cross-field rules checked first)."""
        return model.Scenario(
            name=self.name,
            kind=self.kind,
            workers=to_workers(self.workers),
            groups=tuple(group.to_group() for group in self.jobs),
            interval_s=self.interval_s,
            horizon_s=self.horizon_s,
            slots_per_worker=self.slots_per_worker,
            description=self.description,
            source=self.source,
            profile_set=self.profile_set,
            workload_threading=self.workload_threading,
            migration_cost_s=self.migration_cost_s,
            container_memory_mb=self.container_memory_mb,
            container_pids=self.container_pids,
        )


ScenarioDocument = Annotated[
    ScenarioFile,
    Expected(
        "a mapping of scenario fields (name: ..., kind: ..., jobs: ...); see `dlsched "
        "scenarios NAME` for an example"
    ),
]
"""A whole scenario file: the annotation error messages start from."""


# --- the JSON Schema -------------------------------------------------------------------------


class _FileSchema(GenerateJsonSchema):
    """JSON Schema as an editor should see the file: an omittable field is its type (YAML null
    is refused), and fields carry descriptions rather than titles made from their names."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        generated = super().default_schema(schema)
        if generated.get("default", 0) is None:
            del generated["default"]
        return generated

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of scenario files."""
    schema = ScenarioFile.model_json_schema(schema_generator=_FileSchema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def scenario_json_schema_text() -> str:
    """:func:`scenario_json_schema` as the text of ``scenario.schema.json``."""
    return json.dumps(scenario_json_schema(), indent=2, ensure_ascii=False) + "\n"
