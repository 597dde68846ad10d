"""The race: a crowded stock job's pace switching between levels, drawn per seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlp_crowds import mlp_crowd
from stock_profile_sets import measured_stock_copy

from dlsched.baselines import make
from dlsched.envs.errors import BackendError, ProfileError
from dlsched.envs.replay.profile import load_set_contention
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.replay.race import RaceModel, race_data, race_factor
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.training_env import TrainingEnv, TrainingVectorEnv
from dlsched.runs.evaluation.runners import run_episodes

RACE = RaceModel(
    levels=(0.3, 1.0, 1.7),
    holding_s=(15.0, 10.0, 15.0),
    jumps=((0.0, 0.5, 0.5), (0.5, 0.0, 0.5), (0.5, 0.5, 0.0)),
    full_at=4.0,
)


def _stock_set(tmp_path: Path, race: RaceModel | None) -> str:
    """measured-stock, with ``race`` for its stock jobs (or none): one copy per race a test
    asks for."""
    name = "stock" if race is None else f"stock-race-{race.holding_s[0]:g}"
    directory = tmp_path / name
    return str(directory) if directory.exists() else measured_stock_copy(directory, race)


def _scenario(profile_set: str, jobs: int, iterations: int = 300) -> Scenario:
    """``jobs`` stock mlp-digits jobs arriving together on one 2-core worker."""
    return mlp_crowd(profile_set, jobs, iterations)


def _completions(scenario: Scenario, seeds: range) -> np.ndarray:
    """Per seed, every job's completion time under ``default`` (no limits)."""
    results = run_episodes(scenario, make("default"), list(seeds))
    return np.array([[job.completion_s for job in result.jobs] for result in results])


def test_the_race_is_read_from_the_contention_file(tmp_path) -> None:
    assert load_set_contention(_stock_set(tmp_path, RACE)).races == {"stock": RACE}
    assert set(load_set_contention("measured-stock").races) == {"stock"}  # fitted, shipped


@pytest.mark.parametrize(
    ("race", "message"),
    [
        ({**race_data(RACE), "levels": [1.0, 0.5, 2.0]}, r"races.stock: levels: .*ascending"),
        ({**race_data(RACE), "holding_s": [1.0, -1.0, 1.0]}, r"holding_s: .*3 positive seconds"),
        ({**race_data(RACE), "jumps": [[0, 1, 0], [1, 0, 0], [0.5, 0.6, 0]]}, r"summing to 1"),
        ({**race_data(RACE), "full_at": 1.0}, r"full_at: got 1.0, expected a number > 1"),
        ({"levels": [0.5, 1.5]}, r"races.stock: missing field 'holding_s'"),
        ({**race_data(RACE), "speed": 2}, r"races.stock.speed: unknown field"),
    ],
)
def test_a_malformed_race_names_the_field(tmp_path, race, message) -> None:
    directory = Path(_stock_set(tmp_path, None))
    path = directory / "contention.json"
    data = json.loads(path.read_text())
    data["races"] = {"stock": race}
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=message):
        load_set_contention(str(directory))


def test_the_factor_is_exactly_one_where_threads_fit_and_grows_to_the_level() -> None:
    levels = np.array([0.3, 1.7, 0.3, 0.3])
    factor = race_factor(levels, np.array([1.0, 1.0, 2.5, 4.0]), np.full(4, 4.0), np.zeros(4))
    assert factor.tolist() == pytest.approx([1.0, 1.0, 0.65, 0.3])
    no_race = race_factor(np.array([0.3]), np.array([3.0]), np.array([np.inf]), np.zeros(1))
    assert no_race.tolist() == [1.0]


def test_beyond_full_at_the_level_fades_with_the_crowd() -> None:
    levels = np.full(4, 0.4)
    ratios = np.array([1.5, 2.0, 4.0, 8.0])
    faded = race_factor(levels, ratios, np.full(4, 2.0), np.ones(4))
    # half-way to full_at, at it, then (full_at / R) ** 1 of the level's effect
    assert faded.tolist() == pytest.approx([0.7, 0.4, 0.7, 0.85])
    assert race_factor(levels, ratios, np.full(4, 2.0), np.zeros(4)).tolist() == pytest.approx(
        [0.7, 0.4, 0.4, 0.4]
    )


def test_a_job_whose_threads_fit_the_cores_runs_as_without_a_race_bit_for_bit(tmp_path) -> None:
    # one stock job alone keeps about 1.9 of the 2 cores busy: no crowding, no race
    racing = _completions(_scenario(_stock_set(tmp_path, RACE), 1), range(5))
    plain = _completions(_scenario(_stock_set(tmp_path, None), 1), range(5))
    assert racing.tolist() == plain.tolist()


def test_one_seed_is_one_episode_and_seeds_differ(tmp_path) -> None:
    scenario = _scenario(_stock_set(tmp_path, RACE), 4)
    first, again = _completions(scenario, range(3)), _completions(scenario, range(3))
    assert first.tolist() == again.tolist()
    assert len({tuple(row) for row in first.tolist()}) == 3


def test_the_spread_over_seeds_grows_with_oversubscription(tmp_path) -> None:
    # levels held for hours: each job keeps the level it starts at, so the spread of its
    # completion over seeds is its level's, scaled by s(R) alone
    lasting = RaceModel(RACE.levels, (1e4, 1e4, 1e4), RACE.jumps, RACE.full_at)

    def spread(jobs: int, race: RaceModel | None) -> float:
        completions = _completions(_scenario(_stock_set(tmp_path, race), jobs), range(40))
        return float((completions.std(axis=0) / completions.mean(axis=0)).mean())

    # two stock jobs on 2 cores run at R = 1.9 (a third of the levels), four at R = 3.9
    two, four = spread(2, lasting), spread(4, lasting)
    assert four > 2 * two
    assert two > 5 * spread(2, None)  # the unit-work noise alone spreads far less


def test_the_single_and_the_batched_environment_draw_the_same_race(tmp_path) -> None:
    scenario = _scenario(_stock_set(tmp_path, RACE), 3, iterations=150)
    vector = TrainingVectorEnv(num_envs=3, scenario=scenario)
    vector.reset(seed=[11, 12, 13])
    action = np.ones((3, vector.single_action_space.shape[0]), np.float32)
    ended: dict[int, tuple[float | None, ...]] = {}
    while len(ended) < 3:
        vector.step(action)
        for index in range(3):
            telemetry = vector.telemetry(index)
            if index not in ended and all(job.completed_s is not None for job in telemetry.jobs):
                ended[index] = tuple(job.completed_s for job in telemetry.jobs)
    vector.close()
    for index, seed in enumerate((11, 12, 13)):
        single = TrainingEnv(scenario=scenario)
        _, info = single.reset(seed=seed)
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, info = single.step(action[0])
        assert tuple(job.completed_s for job in info["telemetry"].jobs) == ended[index]
        single.close()


def test_a_speed_spread_draws_each_workloads_speed_per_episode(tmp_path) -> None:
    scenario = _scenario(_stock_set(tmp_path, None), 1)
    plain = _completions(scenario, range(20))[:, 0]

    def spread_completions(seeds: range) -> np.ndarray:
        results = run_episodes(
            scenario, make("default"), list(seeds), backend_options={"speed_spread": 0.2}
        )
        return np.array([result.jobs[0].completion_s for result in results])

    drawn = spread_completions(range(20))
    assert drawn.tolist() == spread_completions(range(20)).tolist()  # one seed, one speed
    assert drawn.std() / drawn.mean() > 10 * plain.std() / plain.mean()
    assert 0.85 < drawn.mean() / plain.mean() < 1.2  # around the profiles' own speed
    with pytest.raises(BackendError, match=r"speed_spread=1.5 must be a coefficient"):
        run_episodes(scenario, make("default"), [0], backend_options={"speed_spread": 1.5})


def test_stock_services_do_not_race_where_stock_trainings_do() -> None:
    """Four reruns of docker-inference-3-stock kept each service's median latency within 0.8% of
    its mean; the race fitted to trainings made replay's spread 40% there (issue #32)."""
    services = ProfileTable(load_scenario("docker-inference-3-stock"))
    assert services.races == [None] * len(services.names) and not services.racing
    trainings = ProfileTable(load_scenario("docker-training-4-stock"))
    assert all(race is not None for race in trainings.races) and trainings.racing
