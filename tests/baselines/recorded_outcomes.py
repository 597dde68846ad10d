"""Every baseline's outcomes on every shipped scenario, recorded so that a change that should
change none of them (a refactor, a new library under the environments) can show it did not.

The recording (``tests/data/baseline-outcomes.json``) holds every metric of every episode of
every baseline of the scenario's kind (``default``, ``equal``, the papers' and the oracle) on
seeds 0-2 of replay; ``test_recorded_outcomes.py`` replays seed 0 of it in every test run, and
this script the whole of it::

    python tests/baselines/recorded_outcomes.py            # check all seeds, exit 1 on a change
    python tests/baselines/recorded_outcomes.py --write    # record anew (a change that moves them)

Record anew only in the commit that means to change outcomes, and say which and why in it.

A metric added since the recording was made is no change of outcomes: the check holds the
metrics the recording has, and the next recording takes the new one in. Metrics that measure the
machine rather than the episode (wall times: ``MetricSpec.reproducible`` false) are never
recorded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from dlsched.baselines import make
from dlsched.envs.scenarios import load_scenario, scenario_names
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.metrics import METRIC_SPECS
from dlsched.runs.evaluation.runners import evaluate

RECORDING = Path(__file__).resolve().parents[1] / "data" / "baseline-outcomes.json"
SEEDS = (0, 1, 2)
#: The baselines of each kind of job (the oracle too: it is the bound's neighbour in every table).
BASELINES: Mapping[JobKind, tuple[str, ...]] = {
    JobKind.INFERENCE: ("default", "equal", "dqoes", "oracle"),
    JobKind.TRAINING: ("default", "equal", "flowcon", "tradl", "specon", "oracle"),
}
#: Replay is deterministic; this only absorbs the last bit of a float printed and read back.
RELATIVE_TOLERANCE = 1e-9

Outcomes = dict[str, dict[str, float | None]]  # "<policy>/seed<seed>" -> metric -> value


def outcomes(scenario_name: str, seeds: Iterable[int]) -> Outcomes:
    """Every reproducible metric of every baseline's episode on ``scenario_name`` and ``seeds``
    (replay)."""
    scenario = load_scenario(scenario_name)
    policies = [make(name) for name in BASELINES[scenario.kind]]
    episodes = evaluate(scenario, policies, list(seeds), progress=False)
    return {
        f"{episode.policy.name}/seed{episode.seed}": {
            metric: value
            for metric, value in dataclasses.asdict(episode.metrics).items()
            if METRIC_SPECS[metric].reproducible
        }
        for episode in episodes
    }


def differences(recorded: Outcomes, now: Outcomes) -> list[str]:
    """Each episode and recorded metric of ``now`` that is not as ``recorded``, as
    ``key metric: a != b`` (a metric the recording does not have is an addition, not a
    change)."""
    found = [f"{key}: recorded, not run now" for key in recorded if key not in now]
    for key, metrics in now.items():
        if key not in recorded:
            found.append(f"{key}: not in the recording")
            continue
        found += [
            f"{key} {metric}: recorded, not measured now"
            for metric in recorded[key]
            if metric not in metrics
        ]
        for metric, value in metrics.items():
            if metric not in recorded[key]:
                continue
            before = recorded[key][metric]
            same = (
                value is None and before is None
                if value is None or before is None
                else math.isclose(value, before, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)
            )
            if not same:
                found.append(f"{key} {metric}: recorded {before!r} != now {value!r}")
    return found


def read_recording() -> dict[str, Outcomes]:
    """The recorded outcomes by scenario name."""
    recording: dict[str, Outcomes] = json.loads(RECORDING.read_text(encoding="utf-8"))["scenarios"]
    return recording


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record anew instead of checking")
    args = parser.parse_args()
    if args.write:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        recording = {
            "commit": commit,
            "seeds": list(SEEDS),
            "scenarios": {name: outcomes(name, SEEDS) for name in scenario_names()},
        }
        RECORDING.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n", "utf-8")
        print(f"recorded {len(recording['scenarios'])} scenarios to {RECORDING}")
        return 0
    recorded = read_recording()
    changed = 0
    for name in scenario_names():
        found = (
            ["not in the recording"]
            if name not in recorded
            else differences(recorded[name], outcomes(name, SEEDS))
        )
        changed += bool(found)
        for line in found:
            print(f"{name}: {line}")
    print(f"{changed} of {len(scenario_names())} scenarios changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
