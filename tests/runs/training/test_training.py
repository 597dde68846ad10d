"""Training learned schedulers: MLflow run and artifacts, determinism, early stopping, the batched
KV writer, scenario mixes and arrival-pattern distributions, and the ``dlsched train`` command."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from mlflow import MlflowClient
from stable_baselines3.common.logger import Logger
from telemetry_factories import inference_job

from dlsched.envs.errors import PolicyError, ScenarioError, TrackingError
from dlsched.envs.observation import FEATURES
from dlsched.envs.rewards import telemetry_reward
from dlsched.envs.scenarios.file_format import load_scenario, parse_scenario
from dlsched.envs.scenarios.model import ArrivalKind, JobKind
from dlsched.envs.telemetry import JobTelemetry, Telemetry, WorkerTelemetry
from dlsched.policies.agent_actions import ActionMapping, ActionMode
from dlsched.policies.learned import CARD_FILE, MODEL_FILE, NORMALIZER_FILE, LearnedPolicy
from dlsched.runs.cli import main
from dlsched.runs.evaluation import evaluate, summarise
from dlsched.runs.policy_specs import resolve_policy
from dlsched.runs.tracking.kvwriter import MlflowKVWriter
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.training import callbacks
from dlsched.runs.training.callbacks import validation_score
from dlsched.runs.training.config import VALIDATION_SEED_BASE, TrainingConfig
from dlsched.runs.training.environments import (
    ScenarioMix,
    VecEnvKind,
    make_training_env,
    make_vec_env,
)
from dlsched.runs.training.harness import (
    BEST_MODEL_DIR,
    CONFIG_FILE,
    FINAL_MODEL_DIR,
    TrainingResult,
    train,
)

#: A small inference distribution: six 10 s steps per episode, 2-4 jobs, two arrival patterns.
TINY: dict[str, object] = {
    "name": "tiny-mix",
    "kind": "inference",
    "interval_s": 10,
    "horizon_s": 60,
    "slots_per_worker": 4,
    "workers": {"count": 1, "cores": 8},
    "jobs": [
        {
            "workloads": ["resnet50", "vgg16"],
            "count": {"low": 2, "high": 4},
            "arrival_choices": [{"kind": "burst"}, {"kind": "fixed", "every_s": 15}],
            "target_range_s": {"low": 10, "high": 60},
        }
    ],
}


def write_scenario(folder: Path, data: dict[str, object], **changes: object) -> Path:
    data = {**data, **changes}
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def tiny_config(scenario: Path, **changes: object) -> TrainingConfig:
    settings: dict[str, object] = {
        "algo": "ppo",
        "scenarios": (str(scenario),),
        "timesteps": 512,
        "n_envs": 2,
        "seed": 0,
        "eval_every": 256,
        "eval_episodes": 2,
        "patience": 0,
        "net_arch": (16,),
        "hyperparams": (("n_steps", 64), ("batch_size", 64), ("n_epochs", 2)),
        "vec_env": VecEnvKind.DUMMY,
    }
    settings.update(changes)
    return TrainingConfig(**settings)


@pytest.fixture(scope="module")
def tracked_run(
    tmp_path_factory: pytest.TempPathFactory, mlflow_store: tuple[Path, str]
) -> tuple[TrainingResult, str, Path]:
    """One short tracked training run: ``(result, tracking uri, scenario file)``."""
    folder, uri = mlflow_store
    work = tmp_path_factory.mktemp("tracked")
    scenario = write_scenario(work, TINY)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # the store's artifacts live beside it
        result = train(
            tiny_config(scenario, timesteps=2048),
            work / "out",
            MlflowClient(uri),
            resolve_target(uri),
            experiment=f"train-test-{uuid.uuid4().hex[:8]}",
            progress=False,
            register_as=REGISTERED,
        )
    return result, uri, scenario


#: The registered name of the tracked run's model (unique per session: the store is shared).
REGISTERED = f"tiny-mix-scheduler-{uuid.uuid4().hex[:8]}"


def resolve_target(uri: str) -> TrackingTarget:
    return TrackingTarget(uri, "--tracking-uri")


@pytest.fixture
def tracked_client(
    tracked_run: tuple[TrainingResult, str, Path],
) -> tuple[TrainingResult, MlflowClient, str]:
    """The tracked run's result, a client of its store and the run's id."""
    result, uri, _ = tracked_run
    assert result.run_id is not None
    return result, MlflowClient(uri), result.run_id


# --- a tracked run and its model -----------------------------------------------------------


def test_training_logs_the_model_its_statistics_and_configuration(
    tracked_client: tuple[TrainingResult, MlflowClient, str],
) -> None:
    _, client, run_id = tracked_client
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["algo"] == "ppo"
    assert run.data.params["hp.n_steps"] == "64"
    assert run.data.tags["dlsched.kind"] == "training"
    names = {Path(a.path).name for a in client.list_artifacts(run_id, FINAL_MODEL_DIR)}
    assert names == {MODEL_FILE, NORMALIZER_FILE, CARD_FILE}
    # the best model is an MLflow Model around the same three files
    names = {Path(a.path).name for a in client.list_artifacts(run_id, BEST_MODEL_DIR)}
    assert {"MLmodel", "dlsched_policy_model.py", "requirements.txt", "artifacts"} <= names
    inner = f"{BEST_MODEL_DIR}/artifacts/policy"
    names = {Path(a.path).name for a in client.list_artifacts(run_id, inner)}
    assert names == {MODEL_FILE, NORMALIZER_FILE, CARD_FILE}
    top = {a.path for a in client.list_artifacts(run_id)}
    assert {CONFIG_FILE, "validation.json", "progress.csv", "scenarios"} <= top
    config = json.loads(Path(client.download_artifacts(run_id, CONFIG_FILE)).read_text())
    assert config["config"]["timesteps"] == 2048
    assert config["config"]["validation_seeds"] == [VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + 1]


def test_training_params_are_stored_as_data_not_python_reprs(
    tracked_client: tuple[TrainingResult, MlflowClient, str],
) -> None:
    _, client, run_id = tracked_client
    params = client.get_run(run_id).data.params
    assert params["slot_agents"] == "false"  # not False
    assert params["normalize_reward"] == "true"
    assert params["net_arch"] == "16"  # not [16] or (16,)
    assert params["eval_scenarios"] == ""  # not ()
    assert params["validation_seeds"] == f"{VALIDATION_SEED_BASE},{VALIDATION_SEED_BASE + 1}"
    assert not any(value.startswith(("(", "[", "{'")) for value in params.values()), params


def test_the_logged_model_is_an_mlflow_model_that_predicts_limits(
    tracked_run: tuple[TrainingResult, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow.pyfunc

    result, uri, scenario_path = tracked_run
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(result.model_uri)
    inputs = model.metadata.get_input_schema().inputs
    assert inputs[0].shape == (-1, -1, len(FEATURES))  # any number of slots
    trained = load_scenario(scenario_path)
    policy = resolve_policy(result.model_uri, tracking_uri=uri)
    assert isinstance(policy, LearnedPolicy)
    # its own layout, and a cluster of 3 workers of 2 slots each
    cluster = dataclasses.replace(
        trained, workers=trained.workers * 3, slots_per_worker=2, name="cluster"
    )
    for scenario in (trained, cluster):
        slots = len(scenario.workers) * scenario.slots_per_worker
        env = gym.make("dlsched/Inference-v0", scenario=scenario)
        observation, _ = env.reset(seed=3)
        limits = model.predict(
            observation[None], params={"slots_per_worker": scenario.slots_per_worker}
        )
        assert limits.shape == (1, slots) and limits.dtype == np.float32
        assert np.all((limits >= 0.0) & (limits <= 1.0))
        # the same limits as the policy dlsched evaluate loads, at an episode's first step
        policy.bind(scenario, env.unwrapped.backend.capabilities)
        policy.reset()
        expected, _ = policy.predict(observation)
        np.testing.assert_allclose(limits[0], expected, rtol=1e-6)


def test_the_registered_model_is_evaluated_by_its_models_uri(
    tracked_run: tuple[TrainingResult, str, Path],
    evaluated_labels: Callable[..., list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, uri, scenario_path = tracked_run
    assert result.registered_uri == f"models:/{REGISTERED}/1"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    labels = evaluated_labels(scenario_path, result.registered_uri, uri)
    assert labels == [f"ppo-{result.run_id[:8]}"]


def test_registering_without_tracking_is_refused_before_training(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, TINY)
    with pytest.raises(TrackingError, match="--register-as"):
        train(tiny_config(scenario), tmp_path / "out", register_as="nowhere", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("actions", "max_step"),
    [("relative", 2.0), ("usage", 2.0), ("share", 64.0), ("share-idle", 64.0)],
)
def test_max_step_defaults_to_a_range_that_lets_a_share_hold_a_worker_back(
    actions: str, max_step: float
) -> None:
    """At 2, a share-idle worker of three services (weights of at least 0.5 each) was always given
    away whole: the share modes default to weights from 1/64 to 64."""
    mode = ActionMode(actions)
    config = TrainingConfig(algo="ppo", scenarios=("s",), timesteps=1, actions=mode)
    assert config.action_mapping.max_step == max_step
    explicit = dataclasses.replace(config, max_step=3.0)
    assert explicit.action_mapping.max_step == 3.0


def test_training_metrics_reach_mlflow_in_batches(
    tracked_client: tuple[TrainingResult, MlflowClient, str],
) -> None:
    result, client, run_id = tracked_client
    rollouts = 2048 // (64 * 2)
    assert len(client.get_metric_history(run_id, "time/iterations")) == rollouts
    qoe = client.get_metric_history(run_id, "rollout/satisfied_fraction")
    assert len(qoe) == rollouts
    assert all(0.0 <= point.value <= 1.0 for point in qoe)
    scores = client.get_metric_history(run_id, "eval/score")
    assert [point.step for point in scores] == [record.timesteps for record in result.validations]
    satisfied = client.get_metric_history(run_id, "eval/tiny-mix/satisfied_fraction_mean")
    assert [p.value for p in satisfied] == pytest.approx(
        [r.metrics["tiny-mix/satisfied_fraction_mean"] for r in result.validations]
    )


def test_evaluation_loads_the_logged_model_and_runs_it_like_a_baseline(
    tracked_run: tuple[TrainingResult, str, Path],
) -> None:
    result, uri, scenario_path = tracked_run
    policy = resolve_policy(result.model_uri, tracking_uri=uri)
    assert isinstance(policy, LearnedPolicy)
    assert policy.card.run_id == result.run_id
    scenario = load_scenario(scenario_path)
    episodes = evaluate(scenario, [resolve_policy("default"), policy], [7, 8], progress=False)
    summaries = {s.label: s for s in summarise([e.score for e in episodes], scenario.kind)}
    assert set(summaries) == {"default", policy.name}
    learned = summaries[policy.name].metric("satisfied_fraction_mean").estimate
    assert learned.n == 2 and learned.mean is not None


def test_dlsched_evaluate_runs_the_logged_model_by_its_run_uri(
    tracked_run: tuple[TrainingResult, str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, uri, scenario_path = tracked_run
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code = main([
        "evaluate", "--scenario", str(scenario_path), "--policy", f"default,{result.model_uri}",
        "--episodes", "2", "--seed", "100", "--tracking-uri", uri, "--no-tracking",
        "--no-progress", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    (scenario,) = json.loads(out)["scenarios"]
    labels = [summary["label"] for summary in scenario["policies"]]
    assert labels == ["default", f"ppo-{result.run_id[:8]}"]
    assert "Downloading artifacts" not in err  # MLflow's bar, even under --no-progress


def test_the_best_validated_model_is_the_one_logged(
    tracked_run: tuple[TrainingResult, str, Path],
) -> None:
    result, _, scenario_path = tracked_run
    best = result.best
    assert best is not None
    assert best.score == max(record.score for record in result.validations)
    # rerunning the validation with the logged model gives the logged score
    policy = resolve_policy(str(result.model_folder))
    scenario = load_scenario(scenario_path)
    episodes = evaluate(scenario, [policy], [VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + 1],
                        progress=False)  # fmt: skip
    mean = np.mean([e.metrics.satisfied_fraction_mean for e in episodes])
    assert mean == pytest.approx(best.score)


def test_a_trained_model_runs_on_another_layout(
    tracked_run: tuple[TrainingResult, str, Path], tmp_path: Path
) -> None:
    """Trained on 1 worker x 4 slots; its slot network acts on 2 workers x 5 slots."""
    result, uri, _ = tracked_run
    policy = resolve_policy(result.model_uri, tracking_uri=uri)
    assert isinstance(policy, LearnedPolicy) and policy.model.policy.log_std.shape == (1,)
    wider = load_scenario(
        write_scenario(
            tmp_path, TINY, name="tiny-wide", slots_per_worker=5, workers={"count": 2, "cores": 8}
        )
    )
    (episode,) = evaluate(wider, [policy], [0], progress=False)
    assert episode.metrics.satisfied_fraction_mean is not None


def test_an_unknown_run_is_reported_with_the_store(mlflow_store: tuple[Path, str]) -> None:
    _, uri = mlflow_store
    with pytest.raises(PolicyError, match="cannot fetch model 'runs:/0123456789abcdef/model'"):
        resolve_policy("runs:/0123456789abcdef/model", tracking_uri=uri)


# --- determinism and early stopping ---------------------------------------------------------


def trained_parameters(config: TrainingConfig, out: Path) -> dict[str, torch.Tensor]:
    result = train(config, out, progress=False)
    policy = resolve_policy(str(result.model_folder / MODEL_FILE))
    assert isinstance(policy, LearnedPolicy)
    return {k: v.clone() for k, v in policy.model.policy.state_dict().items()}


def test_the_same_seed_trains_the_same_model_twice(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        scenario = write_scenario(tmp_path, TINY)
        config = tiny_config(scenario, eval_every=0, torch_threads=1)
        first = trained_parameters(config, tmp_path / "a")
        second = trained_parameters(config, tmp_path / "b")
        other = trained_parameters(tiny_config(scenario, eval_every=0, seed=1), tmp_path / "c")
    finally:
        torch.set_num_threads(threads)
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)
    assert any(not torch.equal(first[name], other[name]) for name in first)


def test_training_stops_after_patience_validations_without_improvement(tmp_path: Path) -> None:
    # No target is reachable (a ResNet-50 batch takes > 5 s on 8 cores): every validation
    # scores 0, so only the first one counts as an improvement.
    hopeless = json.loads(json.dumps(TINY))
    hopeless["name"] = "hopeless"
    hopeless["jobs"][0]["target_range_s"] = {"low": 1, "high": 2}
    scenario = write_scenario(tmp_path, hopeless)
    result = train(
        tiny_config(scenario, timesteps=4096, eval_every=256, patience=2), tmp_path, progress=False
    )
    assert result.stopped_early
    assert [record.improved for record in result.validations] == [True, False, False]
    assert [record.score for record in result.validations] == [0.0, 0.0, 0.0]
    assert result.timesteps < 4096
    assert (result.model_folder / MODEL_FILE).is_file()


def test_validation_on_replay_runs_its_episodes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held-out episodes step as one batched environment, one predict per step for all;
    ``test_the_best_validated_model_is_the_one_logged`` holds their score to evaluate's."""

    def single(*args: object, **kwargs: object) -> None:
        raise AssertionError("the validation ran a single environment per seed")

    monkeypatch.setattr(callbacks, "run_episode", single)
    scenario = write_scenario(tmp_path, TINY)
    result = train(tiny_config(scenario, eval_episodes=3), tmp_path, progress=False)
    assert [record.timesteps for record in result.validations] == [256, 512]
    assert all(0.0 <= record.score <= 1.0 for record in result.validations)


def test_a_training_scheduler_is_validated_as_evaluate_scores_it(tmp_path: Path) -> None:
    """Training episodes end at different steps: the batched validation scores them as
    ``evaluate`` does on single environments, episode by episode."""
    config = tiny_config(Path("train-training-mix"), eval_episodes=3)
    result = train(config, tmp_path, progress=False)
    assert result.best is not None
    policy = resolve_policy(str(result.model_folder))
    scenario = load_scenario("train-training-mix")
    episodes = evaluate(scenario, [policy], config.validation_seeds, progress=False)
    assert len({len(episode.steps) for episode in episodes}) > 1  # they did end apart
    assert validation_score(episodes, JobKind.TRAINING) == pytest.approx(result.best.score)


@pytest.mark.parametrize("algo", ["a2c", "sac", "td3"])
def test_every_algorithm_trains_and_its_model_loads(tmp_path: Path, algo: str) -> None:
    scenario = write_scenario(tmp_path, TINY)
    hyperparams = (("n_steps", 16),) if algo == "a2c" else (("learning_starts", 64),)
    config = tiny_config(scenario, algo=algo, timesteps=160, eval_every=0, hyperparams=hyperparams)
    result = train(config, tmp_path, progress=False)
    policy = resolve_policy(str(result.model_folder))
    assert isinstance(policy, LearnedPolicy) and policy.card.algo == algo
    limits, _ = policy.predict(np.zeros((4, len(FEATURES)), dtype=np.float32))
    assert limits.shape == (4,) and np.all((limits >= 0) & (limits <= 1))


def test_per_slot_agents_train_validate_and_load(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, TINY)
    config = tiny_config(
        scenario,
        slot_agents=True,
        timesteps=1024,  # agent steps: 4 slots x 2 environments x 128 steps
        eval_every=512,
        hyperparams=(("n_steps", 32), ("batch_size", 64), ("n_epochs", 2)),
    )
    result = train(config, tmp_path, progress=False)
    assert [record.timesteps for record in result.validations] == [512, 1024]
    policy = resolve_policy(str(result.model_folder))
    assert isinstance(policy, LearnedPolicy) and policy.card.slot_agents
    limits, _ = policy.predict(np.zeros((4, len(FEATURES)), dtype=np.float32))
    assert limits.shape == (4,)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"algo": "sac", "network": "slot"}, "network 'slot' extends the actor-critic policy"),
        ({"seed": VALIDATION_SEED_BASE}, "are also validation seeds"),
        ({"timesteps": 0}, "timesteps=0 must be at least 1"),
        ({"hyperparams": (("policy_kwargs", "x"),)}, "'policy_kwargs' is set by dlsched"),
        (
            {"policy_kwargs": (("log_std", -2.0),)},
            "SlotActorCriticPolicy takes no policy keyword 'log_std' .did you mean 'log_std_init'",
        ),
        (
            {"algo": "sac", "policy_kwargs": (("ortho_init", True),)},
            "SACPolicy takes no policy keyword 'ortho_init'",
        ),
        ({"policy_kwargs": (("net_arch", 3),)}, "'net_arch' is set by dlsched .use --net-arch"),
        ({"policy_kwargs": (("lr_schedule", 3),)}, "'lr_schedule' is set by dlsched"),
    ],
)
def test_invalid_configurations_are_refused_before_training(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    config = tiny_config(write_scenario(tmp_path, TINY), **changes)
    with pytest.raises(PolicyError, match=message):
        train(config, tmp_path, progress=False)
    assert not any(tmp_path.glob("train-*"))


@pytest.mark.parametrize("network", [{"network": "mlp"}, {"slot_agents": True}])
def test_scenarios_with_different_layouts_are_trained_together_by_the_slot_network_only(
    tmp_path: Path, network: dict[str, object]
) -> None:
    wide = write_scenario(tmp_path, TINY, name="tiny-wide", slots_per_worker=6)
    config = tiny_config(write_scenario(tmp_path, TINY), eval_scenarios=(str(wide),), **network)
    with pytest.raises(ScenarioError, match=r"6 slots.*!=.*only the slot network of one agent"):
        train(config, tmp_path, progress=False)
    assert not any(tmp_path.glob("train-*"))


# --- the MLflow KV writer ---------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def run_id(mlflow_store: tuple[Path, str]) -> tuple[MlflowClient, str]:
    _, uri = mlflow_store
    client = MlflowClient(uri)
    experiment = client.create_experiment(f"kvwriter-{uuid.uuid4().hex[:8]}")
    return client, client.create_run(experiment).info.run_id


def test_kvwriter_sends_in_batches_and_on_close(run_id: tuple[MlflowClient, str]) -> None:
    client, run = run_id
    clock = FakeClock()
    writer = MlflowKVWriter(client, run, max_pending=5, flush_interval_s=60, clock=clock)
    logger = Logger(None, [writer])
    for step in range(3):
        logger.record("train/loss", 1.0 / (step + 1))
        logger.record("train/note", "text is not a metric")
        logger.record("train/hidden", 2.0, exclude="mlflow")
        logger.dump(step)
    assert writer.batches_sent == 0 and writer.pending == 3
    assert client.get_metric_history(run, "train/loss") == []
    for step in range(3, 5):
        logger.record("train/loss", 1.0 / (step + 1))
        logger.dump(step)
    assert writer.batches_sent == 1 and writer.pending == 0
    logger.record("train/loss", 0.1)
    logger.dump(5)
    clock.now = 61.0
    logger.record("train/loss", 0.05)
    logger.dump(6)  # due by time
    assert writer.batches_sent == 2
    logger.record("train/loss", 0.01)
    logger.dump(7)
    logger.close()
    history = client.get_metric_history(run, "train/loss")
    assert sorted((p.step, p.value) for p in history) == [
        (0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25), (4, 0.2), (5, 0.1),
        (6, 0.05), (7, 0.01),
    ]  # fmt: skip
    assert writer.batches_sent == 3
    assert client.get_metric_history(run, "train/hidden") == []


def test_kvwriter_logs_numbers_of_every_kind_but_no_nan(run_id: tuple[MlflowClient, str]) -> None:
    client, run = run_id
    writer = MlflowKVWriter(client, run)
    writer.write(
        {
            "a": np.float32(1.5),
            "b": np.array([2.0]),
            "c": torch.tensor(3.0),
            "d": True,
            "e": float("nan"),
            "f": np.array([1.0, 2.0]),
        },
        {},
        step=4,
    )
    writer.close()
    logged = client.get_run(run).data.metrics
    assert logged == {"a": 1.5, "b": 2.0, "c": 3.0, "d": 1.0}


def test_kvwriter_reports_a_store_that_refuses(run_id: tuple[MlflowClient, str]) -> None:
    client, run = run_id
    client.set_terminated(run)
    client.delete_run(run)
    writer = MlflowKVWriter(client, run, max_pending=1)
    with pytest.raises(TrackingError, match=f"MLflow refused 1 training metrics of run {run}"):
        writer.write({"x": 1.0}, {}, 0)
    assert writer.pending == 1


# --- scenario mixes and arrival-pattern distributions --------------------------------------


def test_a_scenario_mix_draws_scenarios_from_the_seed(tmp_path: Path) -> None:
    burst = load_scenario(write_scenario(tmp_path, TINY, name="a-burst"))
    other = load_scenario(write_scenario(tmp_path, TINY, name="b-other", horizon_s=80))
    env = make_training_env([burst, other], ActionMapping())
    mix = env.unwrapped
    assert isinstance(mix, ScenarioMix)
    drawn = []
    for seed in range(12):
        first, _ = env.reset(seed=seed)
        name = mix.active.unwrapped.scenario.name
        again, _ = env.reset(seed=seed)
        assert mix.active.unwrapped.scenario.name == name
        np.testing.assert_array_equal(first, again)
        drawn.append(name)
    assert set(drawn) == {"a-burst", "b-other"}
    env.close()


def test_arrival_choices_draw_one_pattern_per_group_and_episode(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path, TINY))
    (group,) = scenario.groups
    assert [c.kind for c in group.arrival_choices] == [ArrivalKind.BURST, ArrivalKind.FIXED]
    patterns = set()
    for seed in range(20):
        times = [job.arrival_s for job in scenario.realise(np.random.default_rng(seed))]
        assert times == [0.0] * len(times) or times == [15.0 * i for i in range(len(times))]
        patterns.add("burst" if times[-1] == 0 else "fixed")
    assert patterns == {"burst", "fixed"}


def test_arrival_and_arrival_choices_are_exclusive() -> None:
    data = json.loads(json.dumps(TINY))
    data["jobs"][0]["arrival"] = {"kind": "burst"}
    with pytest.raises(ScenarioError, match="both arrival and arrival_choices are given"):
        parse_scenario(data, "test")
    data["jobs"][0].pop("arrival")
    data["jobs"][0]["arrival_choices"] = [{"kind": "fixed"}]
    with pytest.raises(ScenarioError, match=r"arrival_choices\[0\].every_s is missing"):
        parse_scenario(data, "test")


def test_the_shipped_training_distributions_match_the_paper_layouts() -> None:
    mix = load_scenario("train-inference-mix")
    for paper in ("dqoes-varied-burst", "dqoes-varied-fixed50", "dqoes-random-models"):
        other = load_scenario(paper)
        assert (len(other.workers), other.slots_per_worker) == (1, mix.slots_per_worker)
        assert other.kind is mix.kind


# --- the command line ------------------------------------------------------------------------


def test_train_command_trains_and_says_how_to_evaluate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write_scenario(tmp_path, TINY)
    code = main([
        "train", "--scenario", str(scenario), "--timesteps", "128", "--n-envs", "1",
        "--eval-every", "64", "--eval-episodes", "1", "--net-arch", "8",
        "--hp", "n_steps=64", "--hp", "batch_size=32", "--hp", "learning_rate=3e-4",
        "--policy-kwarg", "log_std_init=-1", "--no-tracking", "--no-progress",
        "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    (folder,) = (tmp_path / "out").iterdir()
    assert f"model: {folder / BEST_MODEL_DIR}" in out
    assert "dlsched evaluate --scenario" in out
    config = json.loads((folder / CONFIG_FILE).read_text())["config"]
    assert config["hyperparams"] == {"n_steps": 64, "batch_size": 32, "learning_rate": 3e-4}
    assert config["policy_kwargs"] == {"log_std_init": -1}


def test_train_command_names_its_experiment_and_says_once_that_timesteps_round_up(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mlflow_store: tuple[Path, str],
) -> None:
    folder, uri = mlflow_store
    monkeypatch.chdir(folder)  # the store's artifacts live beside it
    scenario = write_scenario(tmp_path, TINY)
    experiment = f"train-rounding-{uuid.uuid4().hex[:8]}"
    code = main([
        "train", "--scenario", str(scenario), "--timesteps", "100", "--n-envs", "2",
        "--eval-every", "0", "--net-arch", "8", "--hp", "n_steps=32", "--hp", "batch_size=32",
        "--tracking-uri", uri, "--experiment", experiment, "--no-progress",
        "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    assert err.count("rounds up") == 1
    assert (
        "note: --timesteps 100 rounds up to 128: training runs whole rollouts of n_steps x "
        "environments = 32 x 2 steps"
    ) in err
    assert ": 128 timesteps, done" in out
    assert f"MLflow: experiment {experiment!r}, run " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hp", "gamma"], "--hp 'gamma' is not KEY=VALUE"),
        (["--hp", "gamma=0.9", "--hp", "gamma=0.8"], "--hp sets 'gamma' twice"),
        (["--hp", "net=[1, 2]"], "is not a number, a bool or a string"),
        (["--net-arch", "64,x"], "--net-arch '64,x' must be positive widths"),
        (["--init-from", "dqoes"], "--init-from 'dqoes' names no trained model"),
        (["--init-from", "pretrained:nope"], "pretrained model 'nope'"),
        (["--critic-warmup", "-5"], "critic_warmup=-5 must be >= 0"),
    ],
)
def test_train_command_refuses_malformed_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    scenario = write_scenario(tmp_path, TINY)
    code = main(["train", "--scenario", str(scenario), "--timesteps", "64", "--no-tracking", *args])
    assert code == 2
    assert message in capsys.readouterr().err


# --- the shaped reward the recipe trains with ---------------------------------------------


def service(job_id: str, target_s: float, latency_s: float | None) -> JobTelemetry:
    return inference_job(
        job_id,
        age_s=100.0,
        limit=0.5,
        cpu_usage=1.0,
        cpu_seconds=100.0,
        target_s=target_s,
        latency_s=latency_s,
    )


def test_satisfied_closeness_credits_s_fully_and_near_misses_partly() -> None:
    jobs = (
        service("j0", 20.0, 21.0),  # S: 1
        service("j1", 20.0, 40.0),  # twice the target: 0
        service("j2", 20.0, 20.0 * 2**0.5),  # half-way in log terms: 0.25
        service("j3", 20.0, 5.0),  # a quarter of it: 0
        service("j4", 20.0, None),  # no measurement: 0
    )
    satisfied_closeness = telemetry_reward("satisfied_closeness")
    now = Telemetry(100.0, 10.0, (WorkerTelemetry(0, 8.0, 5.0),), jobs)
    assert satisfied_closeness(now, now) == pytest.approx((1.0 + 0.25) / 5)
    idle = Telemetry(100.0, 10.0, (WorkerTelemetry(0, 8.0, 0.0),), ())
    assert satisfied_closeness(idle, idle) == 0.0


def test_the_progress_bar_counts_the_timesteps_sb3_will_run(tmp_path: Path) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from dlsched.runs.training.callbacks import ProgressBar

    scenario = load_scenario(write_scenario(tmp_path, TINY))
    venv = DummyVecEnv([lambda: make_training_env([scenario], ActionMapping())] * 3)
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=48, n_epochs=1, seed=0)
    model.set_logger(Logger(None, []))  # not SB3's own, which makes a folder in /tmp
    bar = ProgressBar(100)  # on stderr, which pytest captures
    model.learn(100, callback=bar)
    # whole rollouts of 16 steps x 3 environments: 144, not the 100 asked for
    assert model.num_timesteps == 144
    assert bar.bar is not None and bar.bar.total == bar.bar.n == 144


@pytest.mark.parametrize("kind", [VecEnvKind.DUMMY, VecEnvKind.BATCHED])
def test_a_speed_spread_reaches_every_training_environment(kind: VecEnvKind) -> None:
    scenario = load_scenario("docker-training-4-stock")

    def observed(options: dict[str, object] | None) -> np.ndarray:
        venv = make_vec_env([scenario], 2, ActionMapping(), kind, backend_options=options)
        venv.seed(0)
        venv.reset()
        for _ in range(6):
            observations, *_ = venv.step(np.ones((2, *venv.action_space.shape), np.float32))
        venv.close()
        return np.asarray(observations)

    assert not np.array_equal(observed({"speed_spread": 0.3}), observed(None))
    assert np.array_equal(observed({"speed_spread": 0.0}), observed(None))


def test_a_speed_spread_is_for_replay_and_below_one() -> None:
    with pytest.raises(PolicyError, match=r"speed_spread=1.5 must be in \[0, 1\)"):
        tiny_config(Path("x.yaml"), speed_spread=1.5).check()
    with pytest.raises(PolicyError, match=r"backend .docker. runs at its host's own"):
        tiny_config(Path("x.yaml"), speed_spread=0.1, backend="docker").check()
