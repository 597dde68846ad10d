"""The replay model's contention term: where it is zero, how it grows, and what it does to
episodes.

Its fit to measurements is tested with the other fidelity tools, in
``tests/runs/fidelity/test_contention_fit.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mlp_crowds import mlp_crowd

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.errors import ProfileError, ScenarioError
from dlsched.envs.replay.contention import (
    NO_CONTENTION,
    ContentionModel,
    efficiency,
    job_efficiencies,
    load_contention,
    oversubscription,
    runnable_threads,
    thread_counts,
)
from dlsched.envs.replay.profile import PROFILES_DIR, load_profile_set, load_set_contention
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    Scenario,
)

MEASURED_SETS = ("measured", "measured-stock")


# --------------------------------------------------------------------------- runnable threads


def _iterate(busy: np.ndarray, quotas: np.ndarray, cores: float) -> float:
    """The largest fixed point at or above the cores, by bisection (slow, obviously right).

    ``F(N) - N`` is concave, so the counts with ``F(N) >= N`` form one interval: its upper end
    is the largest fixed point. (Plain iteration from the top took millions of steps where a
    quota sits just below the cores.)
    """

    def runnable(threads: float) -> float:
        return float(np.minimum(busy, quotas * threads / cores).sum())

    top = float(busy.sum())
    if runnable(top) >= top - 1e-12:
        return top
    if runnable(cores) < cores:
        return cores  # below the cores every count means R = 1
    low, high = cores, top
    for _ in range(200):
        middle = (low + high) / 2
        if runnable(middle) >= middle:
            low = middle
        else:
            high = middle
    return low


def test_threads_that_fit_the_cores_are_counted_as_they_are():
    assert runnable_threads(np.array([1.0, 0.5]), np.array([np.inf, 1.0]), 2.0) == 1.5


def test_two_stock_jobs_at_equal_limits_keep_all_their_threads_runnable():
    # Each burns its 1-core quota over the whole period when both run: no idle throttled time.
    busy = np.array([1.94, 1.94])
    assert runnable_threads(busy, np.array([1.0, 1.0]), 2.0) == pytest.approx(3.88)


@pytest.mark.parametrize("jobs", [3, 6, 7, 12])
def test_quotas_that_sum_to_the_cores_keep_every_busy_thread_runnable(jobs):
    # jobs x (2 / jobs) cores rounds to just below 2 for 3, 6 and 7 jobs: every N up to the
    # breakpoint is a fixed point, and the largest is all busy threads (it used to be 2: R = 1).
    busy = np.full(jobs, 1.966)
    quotas = np.full(jobs, 1 / jobs) * 2.0
    assert runnable_threads(busy, quotas, 2.0) == pytest.approx(busy.sum())


def test_throttled_jobs_count_only_their_duty_cycle():
    # One uncapped job of 1.64 busy threads and two single-threaded jobs at a third of a core:
    # N = 1.64 + 2 x (0.333 N / 2), so N = 1.64 / (1 - 1/3).
    busy = np.array([1.64, 1.0, 1.0])
    quotas = np.array([np.inf, 1 / 3, 1 / 3])
    assert runnable_threads(busy, quotas, 2.0) == pytest.approx(1.64 / (1 - 1 / 3))


@settings(max_examples=300, deadline=None)
@example(jobs=[(2.0, 0.5)], cores=1.0)  # every job quota-bound: no fixed point above the cores
@example(jobs=[(3.0, 0.99999)], cores=1.0)  # a quota just below the cores: a slow descent
@given(
    st.lists(
        st.tuples(
            st.floats(0.05, 4.0),
            st.one_of(st.just(math.inf), st.floats(0.02, 4.0)),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([1.0, 2.0, 4.0, 8.0]),
)
def test_runnable_threads_is_the_largest_fixed_point(jobs, cores):
    busy = np.array([b for b, _ in jobs])
    quotas = np.array([q for _, q in jobs])
    threads = runnable_threads(busy, quotas, cores)
    if busy.sum() <= cores:
        assert threads == pytest.approx(busy.sum())
        return
    assert cores - 1e-9 <= threads <= busy.sum() + 1e-9
    # Below the cores nothing contends: every count there means R = 1.
    expected = max(_iterate(busy, quotas, cores), cores)
    assert threads == pytest.approx(expected, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize(
    ("limits", "stock", "expected"),
    [
        ([1.0, 0.5, 0.25, 0.3], [False] * 4, [2, 1, 1, 1]),
        ([0.6, 0.75], [False, False], [2, 2]),
        ([0.1, 1.0], [True, True], [2, 2]),
    ],
)
def test_thread_counts_follow_the_quota_only_when_tuned(limits, stock, expected):
    counts = thread_counts(np.array(limits), 2.0, np.array(stock))
    assert counts.tolist() == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.02, 1.0), min_size=1, max_size=6),
    st.floats(0.02, 1.0),
    st.booleans(),
    st.sampled_from([2.0, 4.0, 8.0]),
)
def test_oversubscription_grows_with_every_job_added(limits, extra, stock, cores):
    demands = np.full(len(limits), 0.8 * cores)
    before = oversubscription(np.array(limits), demands, np.full(len(limits), stock), cores)
    after = oversubscription(
        np.array([*limits, extra]),
        np.append(demands, 0.8 * cores),
        np.full(len(limits) + 1, stock),
        cores,
    )
    assert after >= before - 1e-12


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.02, 1.0), min_size=2, max_size=6), st.sampled_from([2.0, 8.0]))
def test_oversubscription_grows_as_a_limit_is_raised(limits, cores):
    demands = np.full(len(limits), cores)
    stock = np.ones(len(limits), dtype=bool)
    base = oversubscription(np.array(limits), demands, stock, cores)
    raised = np.array(limits)
    raised[0] = min(1.0, raised[0] * 2)
    assert oversubscription(raised, demands, stock, cores) >= base - 1e-12


def test_efficiency_is_one_where_threads_fit_and_falls_with_oversubscription():
    model = ContentionModel(exponents={"tuned": 0.13, "stock": 1.11})
    assert model.efficiency("stock", 1.0) == 1.0
    assert model.efficiency("stock", 0.5) == 1.0
    ratios = [1.0, 1.2, 1.5, 2.0, 3.0, 6.0]
    for threading in ("tuned", "stock"):
        values = [model.efficiency(threading, ratio) for ratio in ratios]
        assert values == sorted(values, reverse=True)
        assert values[-1] < 1.0
    assert model.efficiency("stock", 2.0) < model.efficiency("tuned", 2.0)
    assert NO_CONTENTION.efficiency("stock", 5.0) == 1.0


# --------------------------------------------------------------------------- contention files


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"format": 1, "exponents": {"stock": -1}}, r"exponents.stock: got -1, expected"),
        ({"format": 1, "exponents": {"eager": 1}}, r"exponents.eager: unknown threading"),
        ({"format": 2, "exponents": {}}, r"format: got 2, expected 1"),
        ({"format": 1, "exponents": {}, "colour": 1}, r"colour: unknown field"),
        ({"format": 1, "exponents": {}, "fit": {"source": 1}}, r"fit: got"),
        (
            {"format": 1, "exponents": {}, "bound_scales": {"stock": 1.5}},
            r"bound_scales.stock: got 1.5, expected a number in \[0, 1\]",
        ),
        (
            {"format": 1, "exponents": {}, "bound_scales": {"eager": 0.5}},
            r"bound_scales.eager: unknown threading",
        ),
    ],
)
def test_a_malformed_contention_file_names_the_field(tmp_path, content, message):
    (tmp_path / "contention.json").write_text(json.dumps(content))
    with pytest.raises(ProfileError, match=message):
        load_contention(tmp_path)


def test_a_set_without_a_contention_file_has_none(tmp_path):
    assert load_contention(tmp_path) is NO_CONTENTION


# --------------------------------------------------------------------------- per-job efficiency


def _one_worker(limits, busy, cores=2.0, exponent=1.1, floor=0.1, bound_scale=1.0):
    """``job_efficiencies`` of one worker's jobs, with its runnable threads from the model."""
    limits = np.asarray(limits, dtype=float)
    busy = np.asarray(busy, dtype=float)
    quotas = np.where(limits >= 1.0, math.inf, limits * cores)
    runnable = runnable_threads(busy, quotas, cores)
    count = len(limits)
    return runnable, job_efficiencies(
        busy[None, :],
        quotas[None, :],
        np.ones((1, count), dtype=bool),
        np.array([runnable]),
        np.array([cores]),
        np.full((1, count), exponent),
        np.full((1, count), floor),
        np.full((1, count), bound_scale),
    )[0]


def _enumerated(limits, busy, cores, exponent, floor, bound_scale):
    """The same model by enumerating every subset of throttled partners (slow, obviously right)."""
    limits = np.asarray(limits, dtype=float)
    busy = np.asarray(busy, dtype=float)
    quotas = np.where(limits >= 1.0, math.inf, limits * cores)
    runnable = runnable_threads(busy, quotas, cores)
    duty = [
        min(1.0, q * runnable / (cores * u)) if math.isfinite(q) else 1.0
        for q, u in zip(quotas, busy, strict=True)
    ]
    bound = [d < 1.0 - 1e-9 for d in duty]
    kept = []
    for job in range(len(limits)):
        always = busy[job] + sum(busy[j] for j in range(len(limits)) if j != job and not bound[j])
        partners = [j for j in range(len(limits)) if j != job and bound[j]]
        exponent_here = exponent * (bound_scale if bound[job] else 1.0)
        total = weight = 0.0
        for running in itertools.product((False, True), repeat=len(partners)):
            chance = math.prod(
                duty[j] if on else 1.0 - duty[j] for j, on in zip(partners, running, strict=True)
            )
            threads = always + sum(busy[j] for j, on in zip(partners, running, strict=True) if on)
            ratio = max(1.0, threads / cores)
            total += chance / ratio * (floor + (1.0 - floor) * ratio**-exponent_here)
            weight += chance / ratio
        kept.append(total / weight)
    return np.array(kept)


@pytest.mark.parametrize(
    "limits",
    [
        (1.0, 0.25),
        (1.0, 1 / 6, 1 / 6),
        (1.0, 0.125, 0.125, 0.125),
        (0.5, 0.25, 0.25),
        (1.0, 1.0, 0.1, 0.2),
        (1.0, 1.0),
    ],
)
@pytest.mark.parametrize("bound_scale", [1.0, 0.6, 0.0])
def test_per_job_efficiency_is_the_mixture_over_throttled_partners(limits, bound_scale):
    busy = np.full(len(limits), 1.94)
    runnable, kept = _one_worker(limits, busy, bound_scale=bound_scale)
    assert runnable > 2.0
    assert kept == pytest.approx(_enumerated(limits, busy, 2.0, 1.1, 0.1, bound_scale), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([1.0, 0.75, 0.5, 0.3, 0.2, 0.1, 0.05]), min_size=2, max_size=8),
    st.floats(0.0, 1.0),
    st.floats(0.0, 0.5),
)
def test_per_job_efficiency_stays_between_the_floor_and_one(limits, bound_scale, floor):
    runnable, kept = _one_worker(
        limits, np.full(len(limits), 1.9), floor=floor, bound_scale=bound_scale
    )
    if runnable > 2.0:
        assert (kept <= 1.0 + 1e-12).all() and (kept >= floor - 1e-12).all()
        # No job keeps less than it would with every busy thread of the worker runnable.
        worst = floor + (1.0 - floor) * (len(limits) * 1.9 / 2.0) ** -1.1
        assert (kept >= worst - 1e-12).all()


def test_jobs_that_all_run_whenever_they_can_share_one_oversubscription():
    runnable, kept = _one_worker((1.0, 1.0, 1.0), (1.9, 1.9, 1.9))
    assert kept == pytest.approx(efficiency(runnable / 2.0, np.full(3, 1.1), np.full(3, 0.1)))


def test_an_uncapped_job_beside_a_throttled_one_keeps_more_than_in_free_competition():
    _, free = _one_worker((1.0, 1.0), (1.94, 1.94))
    _, favoured = _one_worker((1.0, 0.25), (1.94, 1.94))
    # Measured on a 2-core host (contention.json's stock grid): 0.83 uncapped beside a job at
    # a quarter, 0.47 in free competition.
    assert favoured[0] > free[0]
    assert favoured[0] > favoured[1]


def test_the_bound_scale_spares_throttled_jobs_only():
    _, whole = _one_worker((1.0, 0.25, 0.25), (1.94,) * 3, bound_scale=1.0)
    _, scaled = _one_worker((1.0, 0.25, 0.25), (1.94,) * 3, bound_scale=0.5)
    _, spared = _one_worker((1.0, 0.25, 0.25), (1.94,) * 3, bound_scale=0.0)
    assert scaled[0] == whole[0] == spared[0]
    assert (whole[1:] < scaled[1:]).all() and (scaled[1:] < spared[1:]).all()
    assert spared[1:] == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([1.0, 0.75, 0.5, 0.3, 0.2, 0.1, 0.05]), min_size=2, max_size=6),
        min_size=2,
        max_size=5,
    ),
    st.floats(0.0, 1.0),
    st.floats(0.0, 0.5),
)
@example(workers=[[1.0, 1.0, 1.0], [1.0, 0.25, 0.25]], bound_scale=0.6, floor=0.1)
def test_workers_computed_together_keep_each_its_own_efficiencies(workers, bound_scale, floor):
    """Issue 44 item 8: where one worker had a throttled job, every worker computed beside it
    (another of its episode, or of another episode of a batch) was taken through the states of
    throttled partners, and a worker with none came out an ulp or two off its own result: the
    batched environment drifted from single ones."""
    slots = max(len(limits) for limits in workers)
    rows = len(workers)
    busy, quotas, present = (
        np.zeros((rows, slots)),
        np.zeros((rows, slots)),
        np.zeros((rows, slots), bool),
    )
    runnable = np.zeros(rows)
    for row, limits in enumerate(workers):
        count = len(limits)
        busy[row, :count] = 1.9
        quotas[row, :count] = np.where(
            np.asarray(limits) >= 1.0, math.inf, np.asarray(limits) * 2.0
        )
        present[row, :count] = True
        runnable[row] = max(
            runnable_threads(busy[row, :count], quotas[row, :count], 2.0), 2.0 + 1e-9
        )
    terms = (
        np.full((rows, slots), 1.1),
        np.full((rows, slots), floor),
        np.full((rows, slots), bound_scale),
    )
    together = job_efficiencies(busy, quotas, present, runnable, np.full(rows, 2.0), *terms)
    for row in range(rows):
        alone = job_efficiencies(
            busy[row : row + 1], quotas[row : row + 1], present[row : row + 1],
            runnable[row : row + 1], np.array([2.0]), *(term[row : row + 1] for term in terms),
        )  # fmt: skip
        np.testing.assert_array_equal(together[row], alone[0])


def test_the_measured_sets_share_one_contention_model():
    files = [(PROFILES_DIR / name / "contention.json").read_text() for name in MEASURED_SETS]
    assert files[0] == files[1]


def test_stock_jobs_lose_more_to_contention_than_tuned_ones_on_the_measured_host():
    exponents = load_set_contention("measured").exponents
    assert 0 <= exponents["tuned"] < exponents["stock"]


def test_the_floor_bounds_the_efficiency_and_zero_floor_is_the_power_law():
    ratios = np.array([1.0, 1.5, 3.0, 10.0, 100.0])
    for ratio in ratios:
        plain = efficiency(float(ratio), np.array([1.3]), np.array([0.0]))
        # Bit for bit what the model computed before floors: profiles without one are unchanged.
        assert plain[0] == (float(ratio) ** -np.array([1.3]))[0]
        floored = efficiency(float(ratio), np.array([1.3]), np.array([0.2]))
        assert 0.2 <= floored[0] <= 1.0 and floored[0] >= plain[0]
    along = [efficiency(float(r), np.array([2.0]), np.array([0.2]))[0] for r in ratios]
    assert along == sorted(along, reverse=True)  # monotone in oversubscription


# --------------------------------------------------------------------------- in the replay model


def _set_with(tmp_path: Path, source: str, contention: dict | None) -> str:
    """A copy of profile set ``source`` whose only contention term is ``contention``'s."""
    directory = tmp_path / f"{source}-{'with' if contention else 'without'}"
    shutil.copytree(PROFILES_DIR / source, directory)
    for path in directory.glob("*.json"):
        profile = json.loads(path.read_text())
        own_terms = ("contention_exponent", "contention_floor", "efficiency_beside_startup")
        if [profile.pop(term) for term in own_terms if term in profile]:  # a workload's own
            path.write_text(json.dumps(profile))
    target = directory / "contention.json"
    target.unlink(missing_ok=True)
    if contention is not None:
        target.write_text(json.dumps(contention))
    return str(directory)


def _training(profile_set: str, jobs: int = 3) -> Scenario:
    return mlp_crowd(profile_set, jobs, 600, slots=4, horizon_s=400.0, threading=None)


def _episode(scenario: Scenario, limit: float) -> list[tuple[float, tuple[int, ...]]]:
    env = gym.make("dlsched/Training-v0", scenario=scenario)
    env.reset(seed=3)
    action = np.full(env.action_space.shape, limit, dtype=np.float32)
    trace = []
    done = False
    while not done:
        _, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        telemetry = info["telemetry"]
        trace.append((reward, tuple(job.iterations for job in telemetry.jobs)))
    env.close()
    return trace


CONTENTION = {"format": 1, "exponents": {"tuned": 0.5, "stock": 1.5}}


@pytest.mark.parametrize("source", MEASURED_SETS)
def test_results_are_bit_identical_where_threads_fit(tmp_path, source):
    # Two jobs at half of 2 cores each: one thread each when tuned, two threads on two cores.
    # Stock jobs keep 2 threads each: four threads do not fit, and the results must differ.
    with_term = _training(_set_with(tmp_path, source, CONTENTION), jobs=2)
    without = _training(_set_with(tmp_path, source, None), jobs=2)
    same = _episode(with_term, 0.5) == _episode(without, 0.5)
    assert same is (load_profile_set(source)["mlp-digits"].threading == "tuned")


def test_uncapped_jobs_that_oversubscribe_the_cores_progress_slower(tmp_path):
    with_term = _episode(_training(_set_with(tmp_path, "measured", CONTENTION)), 1.0)
    without = _episode(_training(_set_with(tmp_path, "measured", None)), 1.0)
    assert len(with_term) > len(without)  # the episode lasts longer
    assert sum(with_term[3][1]) < sum(without[3][1])


def test_a_lone_job_never_contends(tmp_path):
    with_term = _episode(_training(_set_with(tmp_path, "measured-stock", CONTENTION), 1), 1.0)
    without = _episode(_training(_set_with(tmp_path, "measured-stock", None), 1), 1.0)
    assert with_term == without


def test_a_running_job_keeps_at_most_its_efficiency_beside_a_start_up(tmp_path):
    # A stock job alone, then a second one arriving at 10 s: while the second starts, the
    # first keeps its efficiency beside a start-up; before, nothing differs.
    def staggered(beside: float | None) -> Scenario:
        directory = Path(_set_with(tmp_path / str(beside), "measured-stock", CONTENTION))
        path = directory / "mlp-digits.json"
        profile = json.loads(path.read_text())
        if beside is not None:
            profile["efficiency_beside_startup"] = beside
        path.write_text(json.dumps(profile))
        scenario = _training(str(directory), jobs=2)
        group = dataclasses.replace(
            scenario.groups[0], arrival=ArrivalPattern(kind=ArrivalKind.FIXED, every_s=10.0)
        )
        return dataclasses.replace(scenario, groups=(group,), interval_s=1.0, horizon_s=30.0)

    (tmp_path / "None").mkdir()
    (tmp_path / "0.05").mkdir()
    plain = _episode(staggered(None), 1.0)
    beside = _episode(staggered(0.05), 1.0)
    assert plain[:10] == beside[:10]  # alone until the second arrives
    beside_gain = np.diff([iterations[0] for _, iterations in beside])
    plain_gain = np.diff([iterations[0] for _, iterations in plain])
    assert beside_gain[10] < plain_gain[10]  # the second one's start-up, after 10 s


def test_a_scenario_of_stock_workloads_refuses_tuned_profiles():
    scenario = dataclasses.replace(_training("measured"), workload_threading="stock")
    with pytest.raises(ScenarioError, match="runs stock workloads but workload 'mlp-digits'"):
        gym.make("dlsched/Training-v0", scenario=scenario)
    stock = dataclasses.replace(_training("measured-stock"), workload_threading="stock")
    gym.make("dlsched/Training-v0", scenario=stock).reset(seed=0)
