"""What the environments' ``scenario=`` and ``limit_floor=`` arguments resolve to.

Shared by the single environments (:mod:`dlsched.envs.scheduling_env`) and the batched replay one
(:mod:`dlsched.envs.replay.vector`), which must not import each other's backends.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from dlsched.envs.errors import ScenarioError
from dlsched.envs.scenarios.model import JobKind, Scenario

#: Default lowest limit, as a fraction of a worker: 2% keeps a starved job alive and measurable.
DEFAULT_LIMIT_FLOOR = 0.02


def resolve_scenario(
    scenario: str | PathLike[str] | Scenario, kind: JobKind, env_id: str
) -> Scenario:
    """Load ``scenario`` by name or path if needed and check it is of the environment's kind."""
    if isinstance(scenario, str | PathLike):
        from dlsched.envs.scenarios.file_format import load_scenario

        scenario = load_scenario(scenario if isinstance(scenario, str) else Path(scenario))
    if scenario.kind is not kind:
        other = (
            "dlsched/Training-v0" if scenario.kind is JobKind.TRAINING else ("dlsched/Inference-v0")
        )
        raise ScenarioError(
            f"scenario {scenario.name!r} has {scenario.kind.value} jobs, but {env_id} runs "
            f"{kind.value} jobs; make {other} with it instead"
        )
    return scenario
