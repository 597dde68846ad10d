"""Training on Ray RLlib: PPO on the batched replay environment, on one machine or many.

``dlsched train --engine rllib`` (or :func:`train_rllib`) is the way past one machine's cores.
It needs the ``ray`` extra (``pip install "dlsched[ray]"``); nothing here imports Ray until a
training starts, so the CLI stays fast without it.

- **Environment**: RLlib makes it through Gymnasium's registry, as
  ``gym.make_vec("dlsched.envs:dlsched/<Kind>-v0", num_envs, vectorization_mode=
  "vector_entry_point", scenario=..., reward=...)``: each env runner steps ``num_envs`` episodes
  in one batched :class:`~dlsched.envs.scheduling_vector_env.SchedulingVectorEnv`. The
  ``module:id`` form imports ``dlsched.envs`` (which registers the ids) in every Ray worker, on
  every machine. RLlib's ``FlattenObservations`` connector gives its default MLP the
  ``(slots, features)`` observation as one vector; the replay environment's observations are
  already normalised, so there is no running filter to ship with the model.
- **Actions**: RLlib acts in ``[-1, 1]`` and maps that linearly onto the environment's
  ``Box(0, 1)`` limits (its ``normalize_actions``), which is exactly dlsched's ``absolute``
  :class:`~dlsched.policies.agent_actions.ActionMapping`.
- **Ray**: with no ``address``, a Ray instance is started on loopback with ``num_cpus`` CPUs and
  shut down at the end; with one (``auto``, ``HOST:6379`` or ``ray://HOST:10001``), the training
  joins that cluster and its env runners spread over its machines. Usage statistics stay off
  unless ``RAY_USAGE_STATS_ENABLED`` says otherwise.
- **Tracking**: one MLflow run, as ``dlsched train`` makes: the configuration as parameters,
  metrics per training iteration (under Stable-Baselines3's names where the quantity is the same,
  so that runs of both engines compare), and as artifacts the model (``model/``, an MLflow Model),
  the RLlib checkpoint (``rllib-checkpoint/``, to resume training with Ray), the scenario and the
  configuration.
- **Model**: RLlib's PPO network (separate policy and value MLPs, ``tanh``, a state-independent
  log standard deviation) is exported into a Stable-Baselines3 PPO of the same shape, weight for
  weight, and saved as a dlsched model folder (:func:`~dlsched.policies.learned.save_model`), so
  that ``dlsched evaluate --policy runs:/<run_id>/model`` loads it without Ray. The export checks
  that both networks give the same actions before it is written.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric

from dlsched.envs.errors import (
    BackendError,
    ModelError,
    PolicyError,
    ScenarioError,
    TrackingError,
)
from dlsched.envs.extras import missing_extra, require_extra
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.agent_actions import ActionMapping, ActionMode
from dlsched.policies.learned import ModelCard, save_model
from dlsched.policies.mlflow_model import save_mlflow_model
from dlsched.runs.evaluation.runners import ENV_IDS
from dlsched.runs.tracking.owners import end_run
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.run_logging import log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, first_line
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import unique_id
from dlsched.runs.training.config import RllibConfig
from dlsched.runs.training.environments import default_reward, layout_of
from dlsched.runs.training.harness import (
    BEST_MODEL_DIR,
    CONFIG_FILE,
    MLFLOW_MODEL_DIR,
    PROGRESS_FILE,
    SCENARIO_DIR,
    TrainingResult,
    TrainingTracking,
    param_text,
    register_model,
    run_ended_if_raised,
    start_training_run,
)

if TYPE_CHECKING:
    from ray.rllib.algorithms import Algorithm
    from ray.rllib.connectors.connector_v2 import ConnectorV2
    from stable_baselines3 import PPO

#: The RLlib checkpoint's folder, locally and among the run's artifacts.
CHECKPOINT_DIR = "rllib-checkpoint"
#: The largest difference allowed between RLlib's and the exported network's actions.
EXPORT_TOLERANCE = 1e-5
#: Ray's switch for clusters of several machines, read when Ray is imported; "0" keeps every
#: process of a local instance on 127.0.0.1 (named for the platforms where that is the default).
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: RLlib's module id of a single-agent policy.
_MODULE_ID = "default_policy"

#: SB3's name of each RLlib metric logged per iteration, with the sign it takes.
_METRICS: Mapping[tuple[str, ...], tuple[str, float]] = {
    ("env_runners", "episode_return_mean"): ("rollout/ep_rew_mean", 1.0),
    ("env_runners", "episode_len_mean"): ("rollout/ep_len_mean", 1.0),
    ("learners", _MODULE_ID, "policy_loss"): ("train/policy_gradient_loss", 1.0),
    ("learners", _MODULE_ID, "vf_loss"): ("train/value_loss", 1.0),
    ("learners", _MODULE_ID, "entropy"): ("train/entropy_loss", -1.0),
    ("learners", _MODULE_ID, "mean_kl_loss"): ("train/approx_kl", 1.0),
    ("learners", _MODULE_ID, "total_loss"): ("train/loss", 1.0),
}

#: The columns of ``progress.csv`` after ``time/total_timesteps``; a value RLlib did not report
#: in an iteration (no episode ended) is left empty.
PROGRESS_FIELDS: tuple[str, ...] = tuple(
    sorted(["time/iterations", "time/fps", *(name for name, _ in _METRICS.values())])
)


def require_ray(local: bool = False) -> None:
    """Import Ray RLlib, or say how to install it.

    Args:
        local: the training will start its own Ray; if Ray is imported here for the first time,
            that instance will stay on the loopback interface. Ray otherwise binds the
            machine's outward address even for a single machine: it keeps to 127.0.0.1 only
            under the switch it has for the platforms where that is the default
            (:data:`LOOPBACK_SWITCH`), which it reads once, on its first import.

    Raises:
        MissingExtraError: Ray (with RLlib's dependencies) is not installed.
    """
    if local and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
    user = "training with --engine rllib"
    require_extra("ray", user)
    try:
        import ray  # noqa: F401
        from ray.rllib.algorithms.ppo import PPOConfig  # noqa: F401
    except ImportError as error:  # one of the packages of ray[tune] that RLlib imports
        raise missing_extra("ray", user, [error.name or str(error)]) from error


def train_rllib(
    config: RllibConfig,
    out: Path,
    client: MlflowClient | None = None,
    target: TrackingTarget | None = None,
    experiment: str | None = None,
    report: Callable[[str], None] | None = None,
    register_as: str | None = None,
) -> TrainingResult:
    """Train PPO on RLlib as ``config`` says; see the module docstring.

    Args:
        config: the training's configuration.
        out: parent of the run's local folder (``<out>/<training id>/``).
        client: an MLflow client whose store was checked; ``None`` tracks nothing.
        target: the store ``client`` writes to (for messages).
        experiment: the MLflow experiment (default ``<scenario>-training``).
        report: called with one line per training iteration (``None``: silent).
        register_as: register the exported model in MLflow's Model Registry under this name
            (a new version if it exists); needs ``client``.

    Returns:
        The result; its ``model_uri`` is what ``dlsched evaluate --policy`` takes.

    Raises:
        MissingExtraError: Ray is not installed.
        PolicyError: an invalid configuration, or hyperparameters RLlib refuses.
        ScenarioError: a scenario the batched environment cannot run.
        TrackingError: the store refused to start the run, or to take its artifacts.
    """
    config.check()
    if register_as is not None and client is None:
        raise TrackingError(
            f"cannot register the model as {register_as!r} without tracking; drop "
            "--no-tracking, or drop --register-as"
        )
    require_ray(local=config.address is None)
    scenario = load_scenario(config.scenario)
    env_id = f"dlsched.envs:{ENV_IDS[scenario.kind]}"
    training_id = unique_id(f"train-rllib-ppo-{scenario.name}")
    folder = out / training_id
    folder.mkdir(parents=True, exist_ok=False)
    _write_inputs(folder, config, scenario)
    tracking = None
    if client is not None and target is not None:
        tracking = start_training_run(
            client,
            target,
            _params(config, scenario),
            training_id,
            experiment or f"{scenario.name}-training",
        )
    interruption: KeyboardInterrupt | None = None
    with run_ended_if_raised(tracking), ray_session(config.address, config.num_cpus) as gcs_address:
        if tracking is not None:
            _set_tag(tracking, "ray.gcs_address", gcs_address)
        algo = _build_algorithm(config, env_id, scenario)
        try:
            steps, interruption = _learn(algo, config, folder, tracking, report)
            card = ModelCard(
                algo="ppo",
                kind=scenario.kind,
                trained_on=(layout_of(scenario),),
                actions=ActionMapping(ActionMode.ABSOLUTE),
                reward=config.reward or default_reward(scenario.kind),
                scenarios=(scenario.name,),
                run_id=tracking.run_id if tracking is not None else None,
                dlsched_version=dlsched_version(),
            )
            export_policy(algo, scenario, card, folder / BEST_MODEL_DIR, config)
            algo.save_to_path(str((folder / CHECKPOINT_DIR).resolve()))
        finally:
            algo.stop()
    result = TrainingResult(
        training_id=training_id,
        folder=folder,
        model_folder=folder / BEST_MODEL_DIR,
        timesteps=steps,
        stopped_early=False,
        run_id=tracking.run_id if tracking is not None else None,
        experiment=tracking.experiment if tracking is not None else None,
        interruption=interruption,
    )
    if tracking is not None:
        _finish_run(tracking, result)
        if register_as is not None:
            registered = register_model(tracking.client, tracking.run_id, register_as)
            result = dataclasses.replace(result, registered_uri=registered)
    return result


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int) -> Iterator[str]:
    """Ray for the duration of a training: joined at ``address``, or started on loopback.

    A Ray this process had already initialised is used as it is and left running; one started
    or joined here is shut down on the way out (a local instance's processes with it).

    Args:
        address: the cluster to join, or ``None`` to start one on 127.0.0.1.
        num_cpus: the CPUs of a started instance.

    Yields:
        The address of the cluster's control store (GCS), ``HOST:PORT``; ``127.0.0.1:PORT``
        for a local instance when :func:`require_ray` first imported Ray with ``local=True``.
    """
    import ray

    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    # Ray reports usage statistics to its authors unless told not to; dlsched does not opt in
    # for its users.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is None:
        options.update(num_cpus=num_cpus, _node_ip_address="127.0.0.1")
    try:
        ray.init(address=address, **options)
    except (ConnectionError, ValueError) as error:
        raise BackendError(
            f"cannot reach the Ray cluster at {address!r}: {first_line(error)}; start it with "
            "`ray start --head` and give its address (HOST:6379, or auto on one of its machines)"
        ) from error
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _build_algorithm(config: RllibConfig, env_id: str, scenario: Scenario) -> Algorithm:
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    torch.set_num_threads(config.torch_threads)
    env_config: dict[str, Any] = {"scenario": scenario}
    if config.reward is not None:
        env_config["reward"] = config.reward
    ppo = (
        PPOConfig()
        .framework("torch")
        .environment(env=env_id, env_config=env_config)
        .env_runners(
            num_env_runners=config.env_runners,
            num_envs_per_env_runner=config.num_envs,
            gym_env_vectorize_mode="vector_entry_point",
            env_to_module_connector=_flatten_observations,
        )
        .learners(num_learners=0)
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=list(config.net_arch),
                fcnet_activation="tanh",
                head_fcnet_hiddens=[],
                free_log_std=True,
                vf_share_layers=False,
            )
        )
        .debugging(seed=config.seed)
    )
    # RLlib types each keyword apart; a wrong one is its error to report, below
    hyperparams: dict[str, Any] = dict(config.hyperparams)
    try:
        ppo = ppo.training(**hyperparams)
        return ppo.build_algo()
    except (TypeError, ValueError) as error:
        if isinstance(error, ScenarioError | PolicyError):
            raise
        raise PolicyError(
            f"RLlib refused the PPO hyperparameters {dict(config.hyperparams)}: "
            f"{first_line(error)}; see the arguments of PPOConfig.training in the RLlib "
            "documentation"
        ) from error


def _flatten_observations(env: Any, spaces: Any = None, device: Any = None) -> ConnectorV2:
    """RLlib's env-to-module connector: each ``(slots, features)`` observation as one vector."""
    from ray.rllib.connectors.env_to_module import FlattenObservations

    return FlattenObservations()


def _learn(
    algo: Algorithm,
    config: RllibConfig,
    folder: Path,
    tracking: TrainingTracking | None,
    report: Callable[[str], None] | None,
) -> tuple[int, KeyboardInterrupt | None]:
    """Train until ``config.timesteps``; the steps done and the interruption, if one came."""
    steps = iteration = 0
    fields = ["time/total_timesteps", *PROGRESS_FIELDS]
    with (folder / PROGRESS_FILE).open("w", newline="", encoding="utf-8") as progress:
        writer = csv.writer(progress)
        writer.writerow(fields)
        try:
            while steps < config.timesteps:
                started = time.monotonic()
                result = algo.train()
                iteration += 1
                sampled = _lookup(result, ("env_runners", "num_env_steps_sampled_lifetime"))
                new_steps = int(sampled) if sampled is not None else steps
                values = _iteration_metrics(result, iteration, new_steps - steps, started)
                steps = new_steps
                row = {"time/total_timesteps": float(steps), **values}
                writer.writerow([row.get(name, "") for name in fields])
                progress.flush()
                if tracking is not None:
                    _log_iteration(tracking, values, steps, folder)
                if report is not None:
                    reward = values.get("rollout/ep_rew_mean")
                    report(
                        f"iteration {iteration}: {steps}/{config.timesteps} timesteps"
                        + (f", mean return {reward:.3f}" if reward is not None else "")
                    )
        except KeyboardInterrupt as stopped:
            return steps, stopped  # keep the work: export and log it as at a normal end
    return steps, None


def _lookup(result: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        return None
    number = float(value)
    return number if np.isfinite(number) else None


def _iteration_metrics(
    result: Mapping[str, Any], iteration: int, new_steps: int, started: float
) -> dict[str, float]:
    values = {"time/iterations": float(iteration)}
    elapsed = time.monotonic() - started
    if elapsed > 0:
        values["time/fps"] = new_steps / elapsed
    for path, (name, sign) in _METRICS.items():
        value = _lookup(result, path)
        if value is not None:
            values[name] = sign * value
    return values


def _log_iteration(
    tracking: TrainingTracking, values: Mapping[str, float], steps: int, folder: Path
) -> None:
    stamp = int(time.time() * 1000)
    metrics = [Metric(name, value, stamp, steps) for name, value in values.items()]
    try:
        log_in_batches(tracking.client, tracking.run_id, metrics=metrics)
    except STORE_ERRORS as error:
        print(
            f"warning: MLflow refused the metrics at {steps} timesteps: {first_line(error)}. "
            f"Training goes on; every value is in {folder / PROGRESS_FILE}",
            file=sys.stderr,
        )


def export_policy(
    algo: Algorithm,
    scenario: Scenario,
    card: ModelCard,
    destination: Path,
    config: RllibConfig,
) -> Path:
    """Save RLlib's trained PPO network as a dlsched model folder (an SB3 PPO of its shape).

    Args:
        algo: the trained algorithm.
        scenario: the training scenario (for the spaces of the exported model).
        card: the model's card.
        destination: the folder to write.
        config: the training's configuration (the network's widths).

    Returns:
        ``destination``.

    Raises:
        ModelError: the exported network's actions differ from RLlib's (an RLlib whose network
            is not the one this export knows).
    """
    import torch
    from ray.rllib.core.columns import Columns

    assert algo.learner_group is not None  # PPO always has one
    state = algo.learner_group.get_state(components="learner/rl_module")
    weights = state["learner"]["rl_module"][_MODULE_ID]
    model = _sb3_ppo(scenario, config.net_arch)
    policy = model.policy
    # SB3's name of each tensor, from RLlib's: the hidden layers are Linear, activation, ...
    names = {"log_std": "pi.log_std"}
    for sb3, rllib in (("policy_net", "actor_encoder"), ("value_net", "critic_encoder")):
        for layer in range(len(config.net_arch)):
            for kind in ("weight", "bias"):
                key = f"{2 * layer}.{kind}"
                names[f"mlp_extractor.{sb3}.{key}"] = f"encoder.{rllib}.net.mlp.{key}"
    for kind in ("weight", "bias"):
        names[f"action_net.{kind}"] = f"pi.net.mlp.0.{kind}"
        names[f"value_net.{kind}"] = f"vf.net.mlp.0.{kind}"
    missing = sorted(set(names.values()) - set(weights))
    if missing:
        raise ModelError(
            f"RLlib's PPO network has no {', '.join(missing)} (it has {', '.join(sorted(weights))}"
            f"); this RLlib's network is not the one dlsched exports. Its checkpoint is in "
            f"{destination.parent / CHECKPOINT_DIR}"
        )
    policy.load_state_dict(
        {sb3: torch.as_tensor(np.asarray(weights[rllib])) for sb3, rllib in names.items()},
        strict=True,
    )
    # Both networks must act alike on the same observations, or the export is wrong.
    space = model.observation_space
    probe = np.stack([space.sample() for _ in range(16)]).astype(np.float32)
    module = algo.get_module(_MODULE_ID)
    assert module is not None
    slots = int(np.prod(model.action_space.shape or ()))
    with torch.no_grad():
        rllib_out = module.forward_inference({Columns.OBS: torch.as_tensor(probe.reshape(16, -1))})
        rllib_mean = rllib_out[Columns.ACTION_DIST_INPUTS][:, :slots]
        distribution = policy.get_distribution(policy.obs_to_tensor(probe)[0]).distribution
        assert isinstance(distribution, torch.distributions.Normal)
        sb3_mean = distribution.mean
    gap = float((rllib_mean - sb3_mean).abs().max())
    if not gap <= EXPORT_TOLERANCE:
        raise ModelError(
            f"the exported network's actions differ from RLlib's by up to {gap:.3g} (more than "
            f"{EXPORT_TOLERANCE:g}); this RLlib's PPO network is not the one dlsched exports. "
            f"Its checkpoint is in {destination.parent / CHECKPOINT_DIR}"
        )
    return save_model(model, None, card, destination)


def _sb3_ppo(scenario: Scenario, net_arch: tuple[int, ...]) -> PPO:
    """An untrained SB3 PPO with RLlib's network shape and dlsched's agent spaces."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    from dlsched.policies.agent_actions import AgentActions

    env = AgentActions(
        gym.make(ENV_IDS[scenario.kind], scenario=scenario),
        ActionMapping(ActionMode.ABSOLUTE),
        layout_of(scenario),
    )
    try:
        return PPO(
            "MlpPolicy",
            env,
            device="cpu",
            policy_kwargs={
                "net_arch": {"pi": list(net_arch), "vf": list(net_arch)},
                "activation_fn": torch.nn.Tanh,
            },
        )
    finally:
        env.close()


def _write_inputs(folder: Path, config: RllibConfig, scenario: Scenario) -> None:
    data = {
        "engine": "rllib",
        "config": config.to_data(),
        "dlsched_version": dlsched_version(),
        "ray_version": _ray_version(),
        "git_commit": source_commit(),
        "command": sys.argv,
        "scenario_hashes": {scenario.name: scenario.content_hash()},
    }
    (folder / CONFIG_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (folder / SCENARIO_DIR).mkdir()
    (folder / SCENARIO_DIR / f"{scenario.name}.yaml").write_text(
        dump_scenario(scenario), encoding="utf-8"
    )


def _ray_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _params(config: RllibConfig, scenario: Scenario) -> dict[str, str]:
    params = {
        key: param_text(value)
        for key, value in config.to_data().items()
        if key not in ("hyperparams", "address")
    }
    params.update({f"hp.{key}": param_text(value) for key, value in config.hyperparams})
    params.update(
        {
            "engine": "rllib",
            "algo": "ppo",
            "scenario_hash": scenario.content_hash(),
            "ray.version": _ray_version(),
            "ray.cluster": config.address or "local",
            "dlsched.version": dlsched_version(),
        }
    )
    return params


def _set_tag(tracking: TrainingTracking, key: str, value: str) -> None:
    try:
        tracking.client.set_tag(tracking.run_id, key, value)
    except STORE_ERRORS as error:
        print(f"warning: MLflow refused tag {key}: {first_line(error)}", file=sys.stderr)


def _finish_run(tracking: TrainingTracking, result: TrainingResult) -> None:
    client, run_id, folder = tracking.client, tracking.run_id, result.folder
    try:
        mlflow_model = save_mlflow_model(result.model_folder, folder / MLFLOW_MODEL_DIR)
        client.log_artifacts(run_id, str(mlflow_model), BEST_MODEL_DIR)
        client.log_artifacts(run_id, str(folder / CHECKPOINT_DIR), CHECKPOINT_DIR)
        client.log_artifacts(run_id, str(folder / SCENARIO_DIR), SCENARIO_DIR)
        for name in (CONFIG_FILE, PROGRESS_FILE):
            client.log_artifact(run_id, str(folder / name))
        if result.interruption is not None:
            client.set_tag(run_id, "dlsched.interrupted", str(result.interruption) or "SIGINT")
        end_run(client, run_id, "KILLED" if result.interruption is not None else "FINISHED")
    except STORE_ERRORS as error:
        with contextlib.suppress(*STORE_ERRORS):
            end_run(client, run_id, "FAILED")
        raise TrackingError(
            f"MLflow refused the artifacts of training run {run_id}: {first_line(error)}; "
            f"everything is on disk in {folder.resolve()}"
        ) from error
