"""dlsched.envs.scenarios: what an experiment runs, as typed data and as YAML files.

:mod:`.model` holds the typed scenario (workers, job groups, arrivals, targets) and draws the
jobs of an episode from it; :mod:`.file_format` reads, validates and writes scenario files, and
holds a scenario built in Python to their rules (``check_scenario``); the file format is defined
once in :mod:`.schema`, which gives the JSON Schema editors check scenario files with
(``scenario.schema.json``, ``dlsched scenarios --schema``); the shipped scenarios are the YAML
files in ``shipped/``, loaded by name.
"""

from dlsched.envs.scenarios.file_format import (
    SCENARIO_DIR,
    check_scenario,
    dump_scenario,
    load_scenario,
    parse_scenario,
    scenario_names,
    scenario_path,
    scenario_text,
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
from dlsched.envs.scenarios.schema import SCHEMA_PATH, scenario_json_schema

__all__ = [
    "SCENARIO_DIR",
    "SCHEMA_PATH",
    "ArrivalKind",
    "ArrivalPattern",
    "FloatRange",
    "IntRange",
    "JobGroup",
    "JobKind",
    "JobSpec",
    "Scenario",
    "WorkerSpec",
    "check_scenario",
    "dump_scenario",
    "load_scenario",
    "parse_scenario",
    "scenario_json_schema",
    "scenario_names",
    "scenario_path",
    "scenario_text",
    "scenario_to_data",
]
