"""Check a core install of dlsched: every shipped scenario through Gymnasium's checker and a
baseline's episode, with no extra's package imported on the way.

Run it with the Python that ``pip install dlsched`` (no extra) installed dlsched into::

    python scripts/core_smoke.py                          # every shipped scenario
    python scripts/core_smoke.py dqoes-varied-burst ...   # the scenarios named

For each scenario it makes the environment of the scenario's kind with ``gymnasium.make`` on the
replay backend, runs ``gymnasium.utils.env_checker.check_env`` on it (any warning of the checker
is a failure), then runs one episode of the paper's baseline for that kind (DQoES for services,
FlowCon for training jobs) to its end, and prints one line per scenario. It exits 1 on the
first scenario that fails, or if a package of an extra was imported (``.ci/run`` runs it in a
fresh virtual environment; ``tests/envs/test_extras.py`` runs it with those packages hidden).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

from dlsched import baselines
from dlsched.envs import InferenceEnv, JobKind, TrainingEnv, load_scenario, scenario_names
from dlsched.envs.extras import EXTRAS
from dlsched.policies import TelemetryFeed

#: The environment and the paper's baseline for each kind of job.
RUNS: dict[JobKind, tuple[str, str]] = {
    JobKind.INFERENCE: (InferenceEnv.env_id, "dqoes"),
    JobKind.TRAINING: (TrainingEnv.env_id, "flowcon"),
}


def smoke(name: str) -> str:
    """Check scenario ``name`` and run its baseline's episode; one line saying how it went.

    Raises:
        AssertionError: the checker warned, or the episode did not end.
    """
    started = time.perf_counter()
    env_id, baseline = RUNS[load_scenario(name).kind]
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        check_env(gym.make(env_id, scenario=name).unwrapped, skip_render_check=True)
    assert not warned, f"{name}: check_env warned: {'; '.join(str(w.message) for w in warned)}"
    policy = baselines.make(baseline)
    env = TelemetryFeed(gym.make(env_id, scenario=name), policy)
    observation, _ = env.reset(seed=0)
    steps, total, done = 0, 0.0, False
    while not done:
        action, _ = policy.predict(observation)
        observation, reward, terminated, truncated, _ = env.step(action)
        steps, total = steps + 1, total + float(reward)
        done = terminated or truncated
    env.close()
    seconds = time.perf_counter() - started
    return f"{name:<36} {baseline:<8} {steps:>5} steps  reward {total:>10.2f}  {seconds:5.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help="shipped scenario names (default: all)")
    names = parser.parse_args(argv).scenarios or scenario_names()
    for name in names:
        try:
            print(smoke(name), flush=True)
        except Exception as error:  # any failure of a scenario is the smoke test's failure
            print(f"{name}: FAILED: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
    extras = sorted({package for packages in EXTRAS.values() for package in packages})
    imported = [package for package in extras if sys.modules.get(package) is not None]
    if imported:
        print(f"imported packages of extras: {', '.join(imported)}", file=sys.stderr)
        return 1
    print(f"{len(names)} scenarios: check_env and a baseline's episode each, no extra imported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
