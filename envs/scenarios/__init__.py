"""dlsched.envs.scenarios: what an experiment runs, as typed data and as YAML files.

:mod:`.model` holds the typed scenario (workers, job groups, arrivals, targets) and draws the
jobs of an episode from it; :mod:`.file_format` reads, validates and writes scenario files; the
shipped scenarios are the YAML files in ``shipped/``, loaded by name.
"""

from dlsched.envs.scenarios.file_format import (
    SCENARIO_DIR,
    dump_scenario,
    load_scenario,
    parse_scenario,
    scenario_names,
    scenario_path,
    scenario_to_data,
)
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    FloatRange,
    IntRange,
    JobGroup,
    JobKind,
    JobSpec,
    Scenario,
    WorkerSpec,
)

__all__ = [
    "SCENARIO_DIR",
    "ArrivalKind",
    "ArrivalPattern",
    "FloatRange",
    "IntRange",
    "JobGroup",
    "JobKind",
    "JobSpec",
    "Scenario",
    "WorkerSpec",
    "dump_scenario",
    "load_scenario",
    "parse_scenario",
    "scenario_names",
    "scenario_path",
    "scenario_to_data",
]
