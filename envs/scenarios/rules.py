"""The rules of a scenario file that no schema says: each relates a field to another one.

The schema (:mod:`.schema`) checks every value on its own. These rules check values against the
rest of the scenario: the counts against their limits (:mod:`.limits`: workers, slots, jobs,
steps, the lists of a job group), the fields only one kind of scenario takes, the workloads a
job group names against the scenario's profile set and kind, the keys that exclude each other
(``workload`` and ``workloads``, ``arrival`` and ``arrival_choices``, ``targets_s`` and
``target_range_s``), worker indices against the workers, arrivals against the horizon.

They run on the file's data whether or not the schema accepted all of it, so that one report holds
every problem: a rule reads each value it needs through the schema's own type for it, and a value
the schema refuses (and reports) is one the rule passes over.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from dlsched.envs.errors import ProfileError, UnknownNameError
from dlsched.envs.replay.profile import load_profile_set, profile_names, profile_set_names
from dlsched.envs.scenarios.model import ArrivalPattern, IntRange, JobKind
from dlsched.envs.scenarios.problems import Report, join, suggest
from dlsched.envs.scenarios.schema import (
    INFERENCE_ONLY,
    TRAINING_ONLY,
    Arrival,
    JobGroupFile,
    ScenarioFile,
    to_whole_or_range,
    worker_count,
)
from dlsched.envs.size_bounds import Counts, check_counts

_STRICT = ConfigDict(strict=True)
_ONLY_FOR = {JobKind.INFERENCE: INFERENCE_ONLY, JobKind.TRAINING: TRAINING_ONLY}
_TARGETS_NEEDED = (
    "latency targets, which inference jobs need: targets_s: [20] (cycled over the jobs) or "
    "target_range_s: {low: 5, high: 95}"
)


@dataclass(frozen=True)
class _Context:
    """What the job groups are checked against; None where the scenario's own value is bad."""

    kind: JobKind | None
    horizon_s: float | None
    worker_count: int | None
    profile_set: str | None
    workload_kinds: Mapping[str, JobKind] | None


def check_rules(data: object, report: Report) -> None:
    """Record in ``report`` every broken cross-field rule of the scenario file ``data``."""
    if not isinstance(data, Mapping):
        return  # the schema reports it
    interval_s = _value(ScenarioFile, data, "interval_s")
    horizon_s = _value(ScenarioFile, data, "horizon_s")
    if interval_s is not None and horizon_s is not None and horizon_s <= interval_s:
        report.bad(
            "horizon_s",
            data["horizon_s"],
            f"more than interval_s = {interval_s:g}, so that an episode has steps",
        )
    workers = _value(ScenarioFile, data, "workers")
    profile_set = _value(ScenarioFile, data, "profile_set")
    context = _Context(
        kind=_value(ScenarioFile, data, "kind"),
        horizon_s=horizon_s,
        worker_count=worker_count(workers) if workers is not None else None,
        profile_set=profile_set,
        workload_kinds=_workload_kinds(profile_set, report) if profile_set is not None else None,
    )
    _check_counts(data, context, interval_s, report)
    groups = data.get("jobs")
    if isinstance(groups, list):
        for index, group in enumerate(groups):
            if isinstance(group, Mapping):
                _check_group(group, f"jobs[{index}]", context, report)


def _check_counts(
    data: Mapping[Any, Any], context: _Context, interval_s: float | None, report: Report
) -> None:
    """The counts of the file against their limits (:mod:`.limits`), before anything is built
    from them."""
    group_counts: list[tuple[str, int]] = []
    lists: list[tuple[str, int]] = []
    groups = data.get("jobs")
    if isinstance(groups, list):
        lists.append(("jobs", len(groups)))
        for index, group in enumerate(groups):
            if not isinstance(group, Mapping):
                continue
            path = f"jobs[{index}]"
            count = _value(JobGroupFile, group, "count")
            if count is not None:
                drawn = to_whole_or_range(count)
                group_counts.append((path, drawn.high if isinstance(drawn, IntRange) else drawn))
            for key, value in _per_job_lists(group):
                lists.append((join(path, key), len(value)))
    workers = data.get("workers")
    check_counts(
        Counts(
            workers=context.worker_count,
            slots_per_worker=_value(ScenarioFile, data, "slots_per_worker"),
            horizon_s=context.horizon_s,
            interval_s=interval_s,
            group_counts=group_counts,
            lists=lists,
        ),
        report,
        workers_path="workers.count" if isinstance(workers, Mapping) else "workers",
    )


def _per_job_lists(group: Mapping[Any, Any]) -> list[tuple[str, list[Any]]]:
    """The lists of a job group that hold (at most) one item per job, by their key."""
    found = [(key, group.get(key)) for key in ("workloads", "targets_s", "arrival_choices")]
    arrival = group.get("arrival")
    if isinstance(arrival, Mapping):
        found.append(("arrival.times_s", arrival.get("times_s")))
    return [(key, value) for key, value in found if isinstance(value, list)]


def _value(model: type[BaseModel], data: Mapping[Any, Any], key: str) -> Any:
    """The field ``key`` of ``data`` as ``model`` types it: its default when absent, None when
    it is required and absent or when the schema refuses it."""
    field = model.model_fields[key]
    if key not in data:
        return None if field.is_required() else field.get_default()
    try:
        return _adapter(model, key).validate_python(data[key])
    except ValidationError:
        return None


@functools.cache
def _adapter(model: type[BaseModel], key: str) -> TypeAdapter[Any]:
    field = model.model_fields[key]
    # typing's special form is a type form at run time; mypy 2.4 with pydantic 2.14's TypeForm
    # annotation does not say so
    annotated: Any = Annotated[(field.annotation, *field.metadata)]
    return TypeAdapter(annotated, config=_STRICT)


@functools.cache
def _arrival_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Arrival, config=_STRICT)


def _workload_kinds(profile_set: str, report: Report) -> dict[str, JobKind] | None:
    """Each workload of the profile set with its kind; None (reported) if the set is unknown or
    cannot be read."""
    try:
        names = profile_names(profile_set)
        profiles = load_profile_set(profile_set)
    except (UnknownNameError, ProfileError) as error:
        report.add("profile_set", f"profile_set = {profile_set!r}: {error}")
        return None
    except OSError as error:  # a name the file system refuses (too long, say)
        report.bad(
            "profile_set",
            profile_set,
            f"a shipped profile set or a readable folder of profiles ({error.strerror or error})",
        )
        return None
    return {name: profiles[name].kind for name in names}


def _check_group(group: Mapping[Any, Any], path: str, context: _Context, report: Report) -> None:
    if context.kind is not None:
        other = JobKind.TRAINING if context.kind is JobKind.INFERENCE else JobKind.INFERENCE
        for key in _ONLY_FOR[other]:
            if key in group:
                report.add(
                    join(path, key),
                    f"{join(path, key)}: only for {other.value} scenarios (kind: {other.value}); "
                    f"remove it",
                )
    _check_workloads(group, path, context, report)
    _check_exclusive(
        group,
        path,
        "arrival",
        "arrival_choices",
        report,
        hint=(" (arrival_choices: [...] draws one of its patterns per episode)"),
    )
    if context.kind is JobKind.INFERENCE and not _check_exclusive(
        group, path, "targets_s", "target_range_s", report
    ):
        report.missing(join(path, "targets_s"), _TARGETS_NEEDED)
    worker = _value(JobGroupFile, group, "worker")
    if worker is not None and context.worker_count is not None and worker >= context.worker_count:
        report.bad(
            join(path, "worker"),
            worker,
            f"a worker index from 0 to {context.worker_count - 1} "
            f"(the scenario has {context.worker_count} worker(s))",
        )
    count = _value(JobGroupFile, group, "count")
    if count is not None:
        drawn = to_whole_or_range(count)
        most = drawn.high if isinstance(drawn, IntRange) else drawn
        _check_arrivals(group, path, most, context, report)
        if not isinstance(drawn, IntRange):
            _check_targets(group, path, drawn, report)


def _check_exclusive(
    group: Mapping[Any, Any], path: str, one: str, other: str, report: Report, *, hint: str = ""
) -> bool:
    """Whether ``group`` has ``one`` or ``other``; both is a problem."""
    if one in group and other in group:
        report.add(path, f"{path}: both {one} and {other} are given; keep one{hint}")
    return one in group or other in group


def _named_workloads(
    group: Mapping[Any, Any], path: str, report: Report
) -> list[tuple[str, object]]:
    """The workload names of ``group`` with their paths, given as ``workload`` or ``workloads``
    (both, or neither, is a problem)."""
    if "workload" in group and "workloads" in group:
        report.add(
            path,
            f"{path}: both workload and workloads are given; keep one (workloads: [a, b] draws "
            f"one of them per job)",
        )
        return []
    if "workload" in group:
        return [(join(path, "workload"), group["workload"])]
    if "workloads" not in group:
        description = JobGroupFile.model_fields["workloads"].description
        report.missing(join(path, "workloads"), str(description))
        return []
    names = group["workloads"]
    if not isinstance(names, list):
        return []  # the schema reports it
    return [(f"{path}.workloads[{index}]", name) for index, name in enumerate(names)]


def _check_workloads(
    group: Mapping[Any, Any], path: str, context: _Context, report: Report
) -> None:
    named = _named_workloads(group, path, report)
    known = context.workload_kinds
    if known is None:  # the profile set itself is bad, and reported
        return
    for name_path, name in named:
        if not isinstance(name, str):
            continue  # the schema reports it
        if name not in known:
            report.bad(
                name_path,
                name,
                f"a workload of profile set {context.profile_set!r}: "
                f"{', '.join(sorted(known))}{suggest(name, sorted(known))}"
                f"{_other_sets(name, context.profile_set)}",
            )
        elif context.kind is not None and known[name] is not context.kind:
            same_kind = sorted(w for w, k in known.items() if k is context.kind)
            report.bad(
                name_path,
                name,
                f"{_a(context.kind.value)} workload (this scenario's kind), but {name!r} is "
                f"{_a(known[name].value)} workload; {context.kind.value} workloads: "
                f"{', '.join(same_kind)}",
            )


def _other_sets(name: str, profile_set: str | None) -> str:
    """Where a workload missing from ``profile_set`` is, if another shipped set has it.

    The two families of names are easy to mix up: the papers' models keep the papers' names
    (``resnet50``, ``vgg16``: set ``paper``, replay only, derived from the papers' figures),
    while dlsched's own image workloads, which run in containers, are named by role
    (``resnet-svc``, ``cnn-digits``: sets ``measured`` and ``measured-stock``, measured on a
    host).
    """
    sets = [
        other
        for other in profile_set_names()
        if other != profile_set and name in profile_names(other)
    ]
    if not sets:
        return ""
    family = (
        "a model of the papers, replayed from their figures"
        if "paper" in sets
        else "one of dlsched's own container workloads, measured on a host"
    )
    where = "profile set" if len(sets) == 1 else "profile sets"
    return (
        f" ({name!r} is {family}: {where} {' and '.join(map(repr, sets))}; set "
        f"profile_set: {sets[0]} to use it)"
    )


def _check_targets(group: Mapping[Any, Any], path: str, count: int, report: Report) -> None:
    """Targets are cycled over the jobs. One or two make a pattern (all alike, alternating), and
    so does any number that divides the count; a longer list that does not is a list of one
    target per job with some missing (9 for 10 jobs) or extra, which is refused."""
    targets = _value(JobGroupFile, group, "targets_s")
    pattern = len(targets or ()) <= 2 or count % len(targets or ()) == 0
    if not targets or (pattern and len(targets) <= count):
        return
    divisors = ", ".join(str(n) for n in range(1, count) if count % n == 0)
    if len(targets) > count:
        what = f"{len(targets) - count} target(s) would never be used"
    else:
        what = (
            f"{len(targets)} would be cycled unevenly, job {len(targets) + 1} getting the first "
            "target again"
        )
    report.bad(
        join(path, "targets_s"),
        group["targets_s"],
        f"one target per job, {count} (count = {count}), or a pattern that repeats evenly "
        f"({divisors} targets); {what}",
    )


def _check_arrivals(
    group: Mapping[Any, Any], path: str, max_count: int, context: _Context, report: Report
) -> None:
    """Each arrival pattern of the group brings every job before the horizon, and an explicit
    one lists a time for each job."""
    patterns: list[tuple[str, object]] = []
    if "arrival" in group:
        patterns.append((join(path, "arrival"), group["arrival"]))
    choices = group.get("arrival_choices")
    if isinstance(choices, list):
        patterns += [(f"{path}.arrival_choices[{i}]", item) for i, item in enumerate(choices)]
    for pattern_path, raw in patterns:
        try:
            arrival: ArrivalPattern = _arrival_adapter().validate_python(raw).to_pattern()
        except ValidationError:
            continue  # the schema reports it
        if arrival.times_s and len(arrival.times_s) < max_count:
            report.bad(
                join(pattern_path, "times_s"),
                raw["times_s"],  # type: ignore[index]  # the schema took it for a mapping
                f"at least {max_count} times, one per job (up to {max_count} jobs)",
            )
            continue
        last = arrival.last_time(max_count)
        if context.horizon_s is not None and last >= context.horizon_s:
            report.add(
                pattern_path,
                f"{pattern_path}: a job may arrive at {last:g} s, at or after horizon_s = "
                f"{context.horizon_s:g}, and would never run; expected every arrival before the "
                f"horizon (lengthen horizon_s or bring the arrivals forward)",
            )


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"
