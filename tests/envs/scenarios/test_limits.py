"""Bad input, as a new user (and a fuzzer) gives it: each case measured on an earlier dlsched is
refused with one message naming the value, what was expected and the fix; exit code 2 from the
command line; never a traceback, a hang, gigabytes of memory or a silent wrong answer.

The unbounded cases (an alias bomb, huge counts, a huge file) run in a subprocess under a memory
limit (``RLIMIT_AS``) with a generous wall-clock ceiling that only catches a hang.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from repo_paths import MODEL_V0_1_0, README

import dlsched.envs  # registers the environments
from dlsched.envs.errors import ActionError, ArgumentError, ModelError, UnknownNameError
from dlsched.runs.cli import main
from dlsched.runs.tracking.target import ENV_VAR

MODEL = MODEL_V0_1_0  # an inference model
MEMORY_LIMIT_BYTES = 6 << 30
"""Address space of a bounded command: what importing torch and MLflow maps (about 4 GiB, most of
it never touched) with room to spare, and far less than the unbounded cases took (tens of GB)."""
HANG_CEILING_S = 300
"""Only a hang takes this long; a refusal takes a second or two."""
FUZZ_SCALE = int(os.environ.get("DLSCHED_FUZZ_SCALE", "1"))
"""Examples of the property tests, times the CI's."""

BASE = """\
name: big
kind: inference
horizon_s: 600
workers: {count: 1, cores: 8}
jobs: [{workload: resnet50, targets_s: [20]}]
"""


def alias_bomb() -> str:
    """A 445-byte scenario whose workloads are aliases of aliases: 9 ** 9 strings expanded."""
    lines = ['xa: &a ["x","x","x","x","x","x","x","x","x"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"x{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n" + BASE.replace("workload: resnet50", "workloads: *i")


def mapping_bomb() -> str:
    """The variant whose anchors are mappings: 8 keys each, 8 ** 8 values expanded."""
    lines = ["xa: &a {a: x, b: x, c: x, d: x, e: x, f: x, g: x, h: x}"]
    for previous, name in zip("abcdefg", "bcdefgh", strict=True):
        keys = ", ".join(f"{key}: *{previous}" for key in "abcdefgh")
        lines.append(f"x{name}: &{name} {{{keys}}}")
    return "\n".join(lines) + "\n" + BASE.replace("workload: resnet50", "workloads: [*h]")


@dataclass(frozen=True)
class Unbounded:
    """A scenario that once took unbounded memory or time, and what its refusal names."""

    text: Callable[[], str]
    field: str
    limit: str


UNBOUNDED = {
    "alias-bomb": Unbounded(alias_bomb, "YAML values", "MAX_YAML_VALUES"),
    "mapping-bomb": Unbounded(mapping_bomb, "YAML values", "MAX_YAML_VALUES"),
    "huge-file": Unbounded(  # the measured case: 39 MB, 13 M targets
        lambda: BASE.replace("[20]", "[" + ",".join(["20"] * 13_000_000) + "]"),
        "larger than 1,048,576 bytes",
        "DLSCHED_MAX_FILE_BYTES",
    ),
    "horizon": Unbounded(
        lambda: BASE.replace("horizon_s: 600", "horizon_s: 1.0e+12"),
        "horizon_s / interval_s",
        "MAX_STEPS",
    ),
    "interval": Unbounded(
        lambda: BASE + "interval_s: 1.0e-9\n", "horizon_s / interval_s", "MAX_STEPS"
    ),
    "workers-2^31": Unbounded(
        lambda: BASE.replace("count: 1", "count: 2147483648"), "workers.count", "MAX_WORKERS"
    ),
    "workers-2^63": Unbounded(
        lambda: BASE.replace("count: 1", "count: 9223372036854775808"),
        "workers.count",
        "MAX_WORKERS",
    ),
    "workers-73M": Unbounded(
        lambda: BASE.replace("count: 1", "count: 73218310"), "workers.count", "MAX_WORKERS"
    ),
    "jobs-2e11": Unbounded(
        lambda: BASE.replace("[20]", "[20], count: 204907264580"), "jobs[0].count", "MAX_JOBS"
    ),
    "jobs-1e40": Unbounded(
        lambda: BASE.replace("[20]", f"[20], count: {10**40}"), "jobs[0].count", "MAX_JOBS"
    ),
    "profile-set": Unbounded(
        lambda: BASE + "profile_set: " + "p" * 300 + "\n", "profile_set", "File name too long"
    ),
}

PEAK_RSS_CEILING_KIB = 1 << 20
"""Resident memory of the process that refuses every case: 1 GiB, most of it the imports (torch,
MLflow); the unbounded cases took gigabytes each."""

_REFUSE_EACH = """\
import contextlib, io, json, resource, sys, time
from dlsched.runs.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"code": code, "err": err.getvalue(), "s": seconds, "rss_kib": rss}))
"""


def refuse_each(commands: list[list[str]], cwd: Path) -> list[dict[str, Any]]:
    """Run each ``dlsched`` command line in one subprocess under the memory limit: its exit
    code, stderr, seconds and the process's peak resident memory after it."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))

    result = subprocess.run(
        [sys.executable, "-c", _REFUSE_EACH, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=HANG_CEILING_S,
        preexec_fn=limit_memory,
        cwd=cwd,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[tuple[str, str], dict[str, Any]]:
    """How ``dlsched scenarios FILE`` and ``dlsched evaluate --scenario FILE`` answered each
    unbounded case, by (command, case)."""
    folder = tmp_path_factory.mktemp("unbounded")
    commands, keys = [], []
    for case, unbounded in UNBOUNDED.items():
        path = folder / f"{case}.yaml"
        path.write_text(unbounded.text())
        commands.append(["scenarios", str(path)])
        commands.append(["evaluate", "--scenario", str(path), "--policy", "default",
                         "--no-tracking", "--no-progress"])  # fmt: skip
        keys += [("scenarios", case), ("evaluate", case)]
    return dict(zip(keys, refuse_each(commands, folder), strict=True))


@pytest.mark.parametrize("command", ["scenarios", "evaluate"])
@pytest.mark.parametrize("case", sorted(UNBOUNDED))
def test_an_unbounded_scenario_is_refused_in_bounded_memory(refusals, command, case):
    result = refusals[command, case]
    assert result["code"] == 2, result["err"][-2000:]
    assert result["err"].startswith(f"dlsched {command}: error:")
    assert "Traceback" not in result["err"]
    assert UNBOUNDED[case].field in result["err"] and UNBOUNDED[case].limit in result["err"]
    assert result["rss_kib"] < PEAK_RSS_CEILING_KIB, result


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def store(mlflow_store, monkeypatch, tmp_path):
    """The session's sqlite store as the environment's tracking URI, run from ``tmp_path``."""
    _, uri = mlflow_store
    monkeypatch.setenv(ENV_VAR, uri)
    monkeypatch.chdir(tmp_path)
    return uri


def cli(capsys, *args: str) -> tuple[int, str]:
    """Exit code and stderr of ``dlsched ARGS`` in this process (argparse's exits included)."""
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def damaged_model(tmp_path: Path, how: str) -> Path:
    """A copy of the fixture model whose model.zip is truncated or another program's zip."""
    folder = tmp_path / f"model-{how}"
    shutil.copytree(MODEL, folder)
    model = folder / "model.zip"
    if how == "truncated":
        model.write_bytes(model.read_bytes()[:2000])
    else:
        model.unlink()
        with zipfile.ZipFile(model, "w") as archive:
            archive.writestr("readme.txt", "not a model")
    return model


@pytest.mark.parametrize("how", ["truncated", "foreign"])
def test_a_damaged_model_file_is_not_a_dlsched_model(capsys, tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    model = damaged_model(tmp_path, how)
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-varied-burst", "--policy", str(model),
        "--no-tracking", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert f"{str(model)!r} is not a dlsched model" in err


def test_an_inference_model_is_refused_on_a_training_scenario(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = cli(
        capsys, "evaluate", "--scenario", "flowcon-10-random", "--policy", str(MODEL),
        "--no-tracking", "--no-progress",
    )  # fmt: skip
    assert code == 2
    assert "schedules inference jobs" in err and "'flowcon-10-random' has training jobs" in err


def test_a_model_is_refused_before_any_episode_runs(tmp_path):
    from dlsched.envs.scenarios import load_scenario
    from dlsched.runs.policy_specs import build_policies

    with pytest.raises(ModelError, match="schedules inference jobs"):
        build_policies([str(MODEL)], {}, scenarios=[load_scenario("flowcon-10-random")])


def test_a_negative_seed_is_refused_before_anything_is_recorded(capsys, store, tmp_path):
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-varied-burst", "--policy", "default",
        "--seed", "-5", "--out", "records",
    )  # fmt: skip
    assert code == 2 and "argument --seed: -5 is negative" in err
    assert not (tmp_path / "records").exists()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("learning_rate=abc", "learning_rate='abc' (str) for PPO: expected a number"),
        ("n_steps=0", "n_steps=0 for PPO: expected a number >= 1"),
        ("batch_size=-1", "batch_size=-1 for PPO: expected a number > 1"),
        ("lerning_rate=0.1", "did you mean 'learning_rate'?"),
    ],
)
def test_a_bad_hyperparameter_is_refused_before_training_starts(
    capsys, store, tmp_path, setting, named
):
    code, err = cli(
        capsys, "train", "--scenario", "dqoes-varied-burst", "--timesteps", "64",
        "--hp", setting, "--out", "trainings", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert named in err
    assert not (tmp_path / "trainings").exists()


def test_sb3s_own_assertions_are_refused_as_a_configuration(capsys, store, tmp_path):
    # PPO asserts n_steps * n_envs > 1 as it builds the model: the range check cannot see it
    code, err = cli(
        capsys, "train", "--scenario", "dqoes-varied-burst", "--timesteps", "64",
        "--hp", "n_steps=1", "--no-tracking", "--eval-every", "0", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "ppo refused the hyperparameters" in err


def test_compare_refuses_a_plot_it_cannot_write(capsys, store):
    code, err = cli(capsys, "compare", "--plot", "/dev/null/x.png")
    assert code == 2 and "argument --plot" in err and "'/dev/null' is a file" in err
    code, err = cli(capsys, "compare", "--plot", "comparison.txt")
    assert code == 2 and "does not end in an image format" in err


def test_compare_names_an_unknown_scenario(capsys, store, tmp_path):
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-resnet50-burst-target20", "--policy",
        "default", "--episodes", "1", "--no-progress", "--no-plots",
        "--experiment", f"bad-input-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    assert code == 0, err
    code, err = cli(capsys, "compare", "--scenario", "dqoes-resnet50-burst-target2", "--no-plot")
    assert code == 2
    assert "unknown scenario 'dqoes-resnet50-burst-target2'" in err
    assert "Did you mean 'dqoes-resnet50-burst-target20'?" in err


@pytest.mark.parametrize("command", ["evaluate", "compare", "train", "validate"])
def test_an_empty_tracking_uri_is_refused(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    required = {
        "evaluate": ["--scenario", "dqoes-varied-burst", "--policy", "default"],
        "compare": [],
        "train": ["--scenario", "dqoes-varied-burst", "--timesteps", "1"],
        "validate": ["--scenario", "dqoes-varied-burst", "--policy", "default"],
    }[command]
    code, err = cli(capsys, command, *required, "--tracking-uri", "")
    assert code == 2 and "argument --tracking-uri: '' is empty" in err


# --- gym.make and reset ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"interval_s": "10"}, "interval_s='10' (str): expected a number of seconds > 0"),
        ({"backend_options": {"bogus": 1}}, "the replay backend takes no option 'bogus'"),
        ({"scenario": 123}, "scenario=123 (int): expected a shipped scenario's name"),
        ({"scenaro": "dqoes-varied-burst"}, "'scenaro' (did you mean 'scenario'?)"),
        ({"limit_floor": 0}, "limit_floor=0 (int): expected a fraction of a worker in (0, 1]"),
        ({"reward": 5}, "reward=5 (int): expected a reward name or a function"),
        ({"placer": "spread"}, "placer='spread' (str): expected a dlsched.envs.Placer"),
        ({"backend_options": {"loss_noise_cv": "x"}}, "loss_noise_cv='x' (str) for the replay"),
        (
            {"backend": "docker", "backend_options": {"workload_threadin": "stock"}},
            "did you mean 'workload_threading'?",
        ),
    ],
)
def test_gym_make_refuses_bad_keyword_arguments(arguments, named):
    with pytest.raises(ArgumentError) as caught:
        gym.make("dlsched/Inference-v0", **arguments)
    assert named in str(caught.value)


def test_gym_make_names_an_unknown_backend():
    with pytest.raises(UnknownNameError, match="Did you mean 'replay'"):
        gym.make("dlsched/Inference-v0", backend="replya")


def test_an_interval_override_is_held_to_the_step_limit():
    with pytest.raises(dlsched.envs.ScenarioError, match="MAX_STEPS"):
        gym.make("dlsched/Inference-v0", interval_s=1e-9)


def test_a_refused_seed_leaves_the_environment_usable():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    with pytest.raises(ArgumentError, match=r"seed=-1 \(int\): expected None or a whole number"):
        env.reset(seed=-1)
    observation, _ = env.reset(seed=np.int64(0))  # a numpy seed is a seed too
    env.step(env.action_space.sample())  # Gymnasium's passive checker failed here
    assert observation.shape == env.observation_space.shape
    with pytest.raises(ArgumentError, match=r"seed=1\.5 \(float\)"):
        env.reset(seed=1.5)


def test_a_scenario_may_be_given_as_a_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(BASE)
    env = gym.make("dlsched/Inference-v0", scenario=path)
    assert env.unwrapped.scenario.name == "big"


def test_the_limits_are_documented_in_the_readme():
    readme = README.read_text()
    from dlsched.envs.scenarios.limits import COUNT_LIMITS

    for limit in COUNT_LIMITS:
        assert f"`{limit.variable}`" in readme, f"{limit.variable} is not in the README"
        assert f"{limit.default:,}" in readme, f"{limit.name}'s default is not in the README"


# --- the limits, one by one -------------------------------------------------------------------


def test_a_limit_is_raised_by_its_environment_variable(monkeypatch):
    from dlsched.envs.scenarios import parse_scenario
    from dlsched.envs.scenarios.limits import MAX_WORKERS

    data = yaml.safe_load(BASE.replace("count: 1", "count: 5000"))
    with pytest.raises(dlsched.envs.ScenarioError) as caught:
        parse_scenario(data, "mine.yaml")
    message = str(caught.value)
    assert "workers.count = 5000: expected at most 4,096 workers" in message
    assert "MAX_WORKERS" in message and "DLSCHED_MAX_WORKERS=N" in message
    monkeypatch.setenv(MAX_WORKERS.variable, "5000")
    assert len(parse_scenario(data, "mine.yaml").workers) == 5000
    monkeypatch.setenv(MAX_WORKERS.variable, "many")
    with pytest.raises(dlsched.envs.ScenarioError, match="DLSCHED_MAX_WORKERS='many': expected"):
        parse_scenario(data, "mine.yaml")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"slots_per_worker": 2000}, "slots_per_worker = 2000: expected at most 1,024 slots"),
        (
            {"slots_per_worker": 1000, "workers": {"count": 100, "cores": 8}},
            "makes 100,000 slots: expected at most 65,536 slots",
        ),
        (
            {"jobs": [{"workload": "resnet50", "targets_s": [20], "count": 60_000}] * 2},
            "add up to 120,000 jobs per episode",
        ),
        (
            {"jobs": [{"workload": "resnet50", "targets_s": [20] * 100_001}]},
            "jobs[0].targets_s: a list of 100,001 items",
        ),
        ({"name": "n" * 101}, "of at most 100 characters"),
        ({"description": "d" * 1001}, "of at most 1000 characters"),
    ],
)
def test_each_count_and_length_is_bounded(change, named):
    from dlsched.envs.scenarios import parse_scenario

    with pytest.raises(dlsched.envs.ScenarioError) as caught:
        parse_scenario({**yaml.safe_load(BASE), **change}, "mine.yaml")
    assert named in str(caught.value)


def test_aliases_within_the_limit_are_read(tmp_path):
    from dlsched.envs.scenarios import load_scenario

    path = tmp_path / "aliases.yaml"
    path.write_text(
        BASE.replace("jobs: [{workload: resnet50, targets_s: [20]}]", "")
        + "jobs:\n"
        + "  - {workload: resnet50, targets_s: [20], arrival: &every {kind: fixed, every_s: 50}}\n"
        + "  - {workload: vgg16, targets_s: [40], arrival: *every}\n"
    )
    scenario = load_scenario(path)
    assert scenario.groups[0].arrival == scenario.groups[1].arrival


def test_an_alias_inside_its_own_anchor_is_named(tmp_path):
    from dlsched.envs.scenarios import load_scenario

    path = tmp_path / "loop.yaml"
    path.write_text("a: &x [*x]\n")
    with pytest.raises(dlsched.envs.ScenarioError, match=r"line 1: an alias .* repeats that value"):
        load_scenario(path)


def test_a_python_made_scenario_is_held_to_the_limits():
    from dlsched.envs.scenarios import load_scenario

    scenario = load_scenario("dqoes-resnet50-burst-target20")
    group = dataclasses.replace(scenario.groups[0], count=10**12)
    huge = dataclasses.replace(scenario, groups=(group,))
    with pytest.raises(dlsched.envs.ScenarioError, match=r"jobs\[0\]\.count = 1000000000000"):
        gym.make("dlsched/Inference-v0", scenario=huge)


# --- hyperparameters and model cards ---------------------------------------------------------


@pytest.mark.parametrize(
    ("algo", "hyperparams", "named"),
    [
        ("ppo", {"seed": 1}, "'seed' is set by dlsched (use --seed)"),
        ("ppo", {"gamma": 1.5}, "gamma=1.5 for PPO: expected a number in [0, 1]"),
        ("ppo", {"n_steps": 64.0}, "n_steps=64.0 (float) for PPO: expected a whole number"),
        ("ppo", {"normalize_advantage": 1}, "expected true or false"),
        ("sac", {"ent_coef": "auto_x"}, "ent_coef='auto_x' for SAC"),
        ("sac", {"train_freq": 0}, "train_freq=0 for SAC: expected a number >= 1"),
        ("td3", {"policy_delay": True}, "policy_delay=True (bool) for TD3"),
    ],
)
def test_hyperparameters_are_held_to_sb3s_signature_and_ranges(algo, hyperparams, named):
    from dlsched.policies.hyperparameters import hyperparameter_problems

    problems = hyperparameter_problems(algo, hyperparams)
    assert len(problems) == 1 and named in problems[0]


@pytest.mark.parametrize(
    "hyperparams",
    [{"learning_rate": 3e-4, "n_steps": 256, "batch_size": 256, "gamma": 0.95, "target_kl": None}],
)
def test_the_readmes_hyperparameters_pass(hyperparams):
    from dlsched.policies.hyperparameters import hyperparameter_problems

    assert hyperparameter_problems("ppo", hyperparams) == []
    assert hyperparameter_problems("sac", {"ent_coef": "auto_0.1", "gradient_steps": -1}) == []


def test_a_card_that_no_model_has_is_refused(tmp_path):
    from dlsched.policies.learned import CARD_FILE, load_model

    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder)
    card = json.loads((folder / CARD_FILE).read_text())
    card["layout"]["workers"] = 0
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match="layout of 0 worker"):
        load_model(folder)
    card["layout"]["workers"] = 2
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match="the card does not belong to this model"):
        load_model(folder)


# --- actions ---------------------------------------------------------------------------------


SLOTS = 10
"""Slots of the stepped scenario (1 worker x 10 slots): its action's size."""


@pytest.fixture(scope="module")
def stepped_env():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    env.reset(seed=0)
    assert env.action_space.shape == (SLOTS,)
    yield env
    env.close()


def step_or_refuse(env, action) -> bool:
    """Step ``env`` with ``action``: True if it stepped, False if it was refused as an
    ActionError (anything else fails the test); an episode that ends is reset."""
    try:
        _, _, terminated, truncated, _ = env.step(action)
    except ActionError:
        return False
    if terminated or truncated:
        env.reset(seed=0)
    return True


@pytest.mark.parametrize(
    ("action", "named"),
    [
        (["0.5"] * SLOTS, "holds <U3 values; expected numbers"),
        ("0.5", "holds <U3 values"),
        (np.array([0.5, None] * 5, dtype=object), "holds object values"),
        ([[0.5], [0.5, 0.5]], "is not an array of numbers"),
        ({"a": 0.5}, "holds object values"),
        (None, "holds object values"),
        (np.array([True, False] * 5), "holds bool values"),
        (np.array([0.5j] * SLOTS), "holds complex128 values"),
        ([0.5], "action shape (1,) does not match"),
        ([0.5] * 9 + [float("nan")], "non-finite values at indices [9]: [nan]"),
    ],
)
def test_an_action_that_is_not_numbers_is_an_action_error(stepped_env, action, named):
    with pytest.raises(ActionError) as caught:
        stepped_env.step(action)
    assert named in str(caught.value)


def test_numbers_of_any_numeric_type_are_an_action(stepped_env):
    size = stepped_env.action_space.shape[0]
    for action in (
        [0.5] * size,
        (1,) * size,
        [np.float16(0.5)] * size,
        np.full(size, 3, dtype=np.uint8),  # above 1: clipped, as an agent's raw output is
        np.array([0.5] * size, dtype=object),
    ):
        assert step_or_refuse(stepped_env, action), action


def test_a_decision_of_the_wrong_types_is_an_action_error(stepped_env):
    from dlsched.envs import Decision
    from dlsched.envs.decision import Migration

    unwrapped = stepped_env.unwrapped
    job = unwrapped.telemetry.jobs[0].job_id
    with pytest.raises(ActionError, match=r"limit of job .* is '0\.5' \(str\)"):
        unwrapped.step_decision(Decision(limits={job: "0.5"}))
    with pytest.raises(ActionError, match="step_decision takes a Decision"):
        unwrapped.step_decision({job: 0.5})
    with pytest.raises(ActionError, match="expected Migration"):
        unwrapped.step_decision(Decision(migrations=((job, 0),)))
    with pytest.raises(ActionError, match="the worker a whole number"):
        unwrapped.step_decision(Decision(migrations=(Migration(job, "0"),)))


def object_array(items: list[object]) -> np.ndarray:
    """``items`` in a numpy array of Python objects, whatever they are."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers())
_anything = st.one_of(_numbers, st.none(), st.booleans(), st.text(max_size=4), st.complex_numbers())
random_actions = st.one_of(
    st.lists(_anything, max_size=12),
    st.lists(_numbers, min_size=SLOTS, max_size=SLOTS),  # the right size
    st.lists(st.lists(_numbers, max_size=3), max_size=4),  # nested, maybe ragged
    _anything,
    st.dictionaries(st.text(max_size=3), _numbers, max_size=3),
    st.lists(_anything, min_size=SLOTS, max_size=SLOTS).map(object_array),
    hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=2, max_side=5)),
    hnp.arrays(hnp.scalar_dtypes(), SLOTS),
)


@settings(max_examples=200 * FUZZ_SCALE, deadline=None)
@given(action=random_actions)
@example(action=["0.5"] * SLOTS)
@example(action=np.array([0.5, None] * 5, dtype=object))
@example(action=[2**70] * SLOTS)
@example(action=[10**400] * SLOTS)
def test_a_random_action_steps_or_is_an_action_error(stepped_env, action):
    event("stepped" if step_or_refuse(stepped_env, action) else "refused: ActionError")


# --- a bug of dlsched ------------------------------------------------------------------------


def test_a_bug_is_one_line_naming_its_log_and_exit_1(capsys, tmp_path, monkeypatch):
    from dlsched.runs.commands import scenarios

    def buggy(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(scenarios, "run", buggy)
    code, err = cli(capsys, "scenarios")
    assert code == 1 and "Traceback" not in err
    assert "dlsched scenarios: internal error (a bug of dlsched" in err
    log = Path(err.split("(traceback: ")[1].split(";")[0])
    assert "ZeroDivisionError: a bug" in log.read_text() and "Traceback" in log.read_text()
    with pytest.raises(ZeroDivisionError):  # --verbose: the traceback in the terminal
        main(["scenarios", "--verbose"])
