"""The training harness: train an SB3 agent on scenarios, validate it, keep and track the model.

One call of :func:`train` is one training run:

1. the training scenarios (one or several, possibly distributions: see
   :meth:`~dlsched.envs.scenarios.model.Scenario.realise`) and the validation scenarios are
   loaded and checked to share a job kind and, unless the agent is the slot network of one
   agent, which reads any layout, an observation layout (several are padded to one enclosing
   them all: :mod:`dlsched.runs.training.padded_layout`);
2. ``n_envs`` environments (:mod:`dlsched.runs.training.environments`) are vectorised and
   normalised per feature, and the agent (:data:`~dlsched.policies.learned.ALGORITHMS`) is built
   on them with the slot-shared network of :mod:`dlsched.policies.slot_network` (PPO, A2C) or
   SB3's MLP, from scratch or from a trained model's weights and statistics (``init_from``:
   :mod:`dlsched.runs.training.warm_start`);
3. it learns, with a progress bar, the rollout QoE, and a validation on held-out seeds every
   ``eval_every`` timesteps that keeps the best model and stops after ``patience``
   validations without improvement (:mod:`dlsched.runs.training.callbacks`);
4. everything is written to a local folder first (``<out>/<training id>/``), then, when tracked,
   to one MLflow run: parameters, the SB3 log through the batched
   :class:`~dlsched.runs.tracking.kvwriter.MlflowKVWriter`, and as artifacts the best model
   (``model/``, what ``runs:/<run_id>/model`` names), the last one (``final-model/``), the exact
   configuration (``training_config.json``), the scenarios as they ran and the validation
   history.

An interrupted training keeps its work: on Ctrl-C or SIGTERM the latest weights and
normalisation statistics are saved (``final-model/``), the best model so far and the validation
history are logged as at a normal end, and the run is ended ``KILLED``
(:attr:`TrainingResult.interruption` holds the signal, for the caller to re-raise). If the store
stops answering, training goes on untracked and ``dlsched runs sync <folder>`` uploads the rest
(``tracking.json`` in the folder names the run).

Seeds: the training environments are reset with seeds ``seed .. seed + n_envs - 1`` once and
then draw every later episode from their own generators; validation uses seeds from
:data:`~dlsched.runs.training.config.VALIDATION_SEED_BASE` on, so that no validation episode is
a training one. Evaluate a trained model with yet other seeds (``dlsched evaluate --seed 100``,
say): validation chose the model, so its seeds are no longer held out for a final comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import secrets
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import CSVOutputFormat, KVWriter, Logger
from stable_baselines3.common.vec_env import VecEnv, VecFrameStack, VecNormalize

from dlsched.envs.errors import PolicyError, TrackingError
from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies.learned import LearnedPolicy, ModelCard, algorithm_class, save_model
from dlsched.policies.mlflow_model import save_mlflow_model
from dlsched.policies.normalization import hold_statistics, slot_normalizer
from dlsched.policies.slot_network import SlotActorCriticPolicy
from dlsched.runs.tracking.kvwriter import MlflowKVWriter
from dlsched.runs.tracking.owners import end_run, owner_tags
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.run_logging import TAG_KIND, log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, first_line
from dlsched.runs.tracking.store import experiment_id as store_experiment_id
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import TrackingRecord
from dlsched.runs.training.callbacks import ProgressBar, RolloutQoE, Validation, ValidationRecord
from dlsched.runs.training.config import TrainingConfig
from dlsched.runs.training.environments import (
    check_compatible,
    default_reward,
    layout_of,
    make_vec_env,
)
from dlsched.runs.training.feature_selection import SelectFeatures
from dlsched.runs.training.imitation import batched_under, imitate
from dlsched.runs.training.warm_start import CriticWarmUp, check_start, load_start, warm_start

BEST_MODEL_DIR = "model"
#: The local folder of the best model as an MLflow Model, logged as ``model/``.
MLFLOW_MODEL_DIR = "mlflow-model"
FINAL_MODEL_DIR = "final-model"
CONFIG_FILE = "training_config.json"
VALIDATION_FILE = "validation.json"
PROGRESS_FILE = "progress.csv"
IMITATION_FILE = "imitation.json"
SCENARIO_DIR = "scenarios"


@dataclass(frozen=True)
class TrainingResult:
    """What a training run produced.

    Attributes:
        training_id: the run's id (its local folder's and MLflow run's name).
        folder: the local folder.
        model_folder: the model to use (the best validated one, else the last).
        timesteps: timesteps trained.
        stopped_early: whether validation stopped it before ``timesteps``.
        validations: every validation, in order.
        run_id: the MLflow run, when tracked.
        experiment: its experiment's name.
        interruption: the SIGINT or SIGTERM that stopped it early, if one did (its work is
            saved and logged all the same).
        registered_uri: ``models:/<name>/<version>`` where the best model was registered in
            the Model Registry, if it was.
    """

    training_id: str
    folder: Path
    model_folder: Path
    timesteps: int
    stopped_early: bool
    validations: tuple[ValidationRecord, ...] = ()
    run_id: str | None = None
    experiment: str | None = None
    interruption: KeyboardInterrupt | None = None
    registered_uri: str | None = None

    @property
    def model_uri(self) -> str:
        """What ``dlsched evaluate --policy`` takes to load the model."""
        return f"runs:/{self.run_id}/{BEST_MODEL_DIR}" if self.run_id else str(self.model_folder)

    @property
    def final_model_uri(self) -> str:
        """The latest weights (``final-model/``), as ``dlsched evaluate --policy`` takes them."""
        if self.run_id:
            return f"runs:/{self.run_id}/{FINAL_MODEL_DIR}"
        return str(self.folder / FINAL_MODEL_DIR)

    @property
    def best(self) -> ValidationRecord | None:
        improved = [record for record in self.validations if record.improved]
        return improved[-1] if improved else None


@dataclass
class TrainingTracking:
    """The MLflow side of one training run: its run, in the experiment of that id and name."""

    client: MlflowClient
    target: TrackingTarget
    run_id: str
    experiment_id: str
    experiment: str


def new_training_id(config: TrainingConfig, scenario: Scenario) -> str:
    """A unique training id: ``train-<algo>-<scenario>-<UTC date-time>-<random hex>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"train-{config.algo}-{scenario.name}-{stamp}-{secrets.token_hex(3)}"


def train(
    config: TrainingConfig,
    out: Path,
    client: MlflowClient | None = None,
    target: TrackingTarget | None = None,
    experiment: str | None = None,
    progress: bool = True,
    register_as: str | None = None,
) -> TrainingResult:
    """Run one training as ``config`` says; see the module docstring.

    Args:
        config: the run's configuration.
        out: parent of the run's local folder.
        client: an MLflow client whose store was checked (``connect``); ``None`` tracks nothing.
        target: the store ``client`` writes to (for messages).
        experiment: the MLflow experiment (default ``<first scenario>-training``).
        progress: show a progress bar.
        register_as: register the best model in MLflow's Model Registry under this name (a
            new version if it exists); needs ``client``.

    Raises:
        PolicyError: an invalid configuration.
        ScenarioError: scenarios that cannot share one model.
        TrackingError: the store refused to start the run (nothing has been trained), or to
            take its artifacts at the end (everything is in the local folder).
    """
    config.check()
    if register_as is not None and client is None:
        raise TrackingError(
            f"cannot register the model as {register_as!r} without tracking; drop "
            "--no-tracking, or drop --register-as"
        )
    scenarios = tuple(load_scenario(name) for name in config.scenarios)
    eval_scenarios = (
        tuple(load_scenario(name) for name in config.eval_scenarios)
        if config.eval_scenarios
        else scenarios
    )
    any_layout = config.resolved_network == "slot" and not config.slot_agents
    check_compatible(scenarios, "training", any_layout)
    check_compatible([scenarios[0], *eval_scenarios], "training and validation", any_layout)
    start = None
    if config.init_from is not None:
        start = load_start(config.init_from, target.uri if target is not None else None)
        check_start(start, config, scenarios[0].kind)
    training_id = new_training_id(config, scenarios[0])
    folder = out / training_id
    folder.mkdir(parents=True, exist_ok=False)
    _write_inputs(folder, config, scenarios, eval_scenarios)
    tracking = (
        start_training_run(
            client,
            target,
            _params(config),
            training_id,
            experiment or f"{scenarios[0].name}-training",
        )
        if client is not None and target is not None
        else None
    )
    if tracking is not None:
        TrackingRecord(
            "training", tracking.target.uri, tracking.experiment_id, tracking.run_id, training_id
        ).write(folder)
    with run_ended_if_raised(tracking):
        result = _learn(
            config, scenarios, eval_scenarios, folder, training_id, tracking, progress, start
        )
    if tracking is not None:
        try:
            _finish_run(tracking, result)
            if register_as is not None:
                result = dataclasses.replace(
                    result,
                    registered_uri=register_model(tracking.client, tracking.run_id, register_as),
                )
        except STORE_ERRORS as error:
            with contextlib.suppress(*STORE_ERRORS):
                end_run(tracking.client, tracking.run_id, "FAILED")
            raise TrackingError(
                f"MLflow refused the artifacts of training run {tracking.run_id}: "
                f"{first_line(error)}; everything is on disk in {folder.resolve()}: upload it "
                f"when the store answers with `dlsched runs sync {folder.resolve()}`"
            ) from error
    return result


def _write_inputs(
    folder: Path,
    config: TrainingConfig,
    scenarios: Sequence[Scenario],
    eval_scenarios: Sequence[Scenario],
) -> None:
    data = {
        "config": config.to_data(),
        "dlsched_version": dlsched_version(),
        "git_commit": source_commit(),
        "command": sys.argv,
        "scenario_hashes": {
            scenario.name: scenario.content_hash() for scenario in (*scenarios, *eval_scenarios)
        },
    }
    (folder / CONFIG_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    scenario_dir = folder / SCENARIO_DIR
    scenario_dir.mkdir()
    for scenario in {s.name: s for s in (*scenarios, *eval_scenarios)}.values():
        (scenario_dir / f"{scenario.name}.yaml").write_text(
            dump_scenario(scenario), encoding="utf-8"
        )


def start_training_run(
    client: MlflowClient,
    target: TrackingTarget,
    params: dict[str, str],
    training_id: str,
    experiment: str,
) -> TrainingTracking:
    """Create the MLflow run of one training (tagged as a training, owned by this process).

    Args:
        client: a client of the checked store.
        target: the store, for messages.
        params: the run's parameters, as text.
        training_id: the run's name (its local folder's).
        experiment: the experiment's name, created if missing.

    Raises:
        TrackingError: the store refused; nothing has been trained.
    """
    try:
        experiment_id = store_experiment_id(client, experiment, target)
        tags = {TAG_KIND: "training", **owner_tags()}
        commit = source_commit()
        if commit is not None:
            tags[MLFLOW_GIT_COMMIT] = commit
        run = client.create_run(experiment_id, run_name=training_id, tags=tags)
        run_id = run.info.run_id
        log_in_batches(client, run_id, params=params)
    except STORE_ERRORS as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} refused to start the training run: {error}; "
            "check the store, or train without tracking (--no-tracking)"
        ) from error
    return TrainingTracking(client, target, run_id, experiment_id, experiment)


@contextlib.contextmanager
def run_ended_if_raised(tracking: TrainingTracking | None) -> Iterator[None]:
    """End the training's run (if tracked) when the block raises: ``KILLED`` by an interrupt,
    else ``FAILED``; the error goes on, whether or not the store takes the status."""
    try:
        yield
    except BaseException as error:
        if tracking is not None:
            status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
            with contextlib.suppress(*STORE_ERRORS):
                end_run(tracking.client, tracking.run_id, status)
        raise


def param_text(value: object) -> str:
    """A parameter as MLflow stores it (text), written as data rather than a Python repr.

    Booleans are ``true``/``false``, lists are comma-separated, mappings JSON, and ``None`` is
    empty, so that a search (``params.frame_stack = '2'``) and a reader in any language find
    the value a user typed.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(param_text(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _params(config: TrainingConfig) -> dict[str, str]:
    params = {
        key: param_text(value)
        for key, value in config.to_data().items()
        if key not in ("hyperparams", "policy_kwargs")
    }
    params.update({f"hp.{key}": param_text(value) for key, value in config.hyperparams})
    params.update({f"policy.{key}": param_text(value) for key, value in config.policy_kwargs})
    params["dlsched.version"] = dlsched_version()
    return params


def _learn(
    config: TrainingConfig,
    scenarios: Sequence[Scenario],
    eval_scenarios: Sequence[Scenario],
    folder: Path,
    training_id: str,
    tracking: TrainingTracking | None,
    progress: bool,
    start: LearnedPolicy | None,
) -> TrainingResult:
    """Train on ``scenarios``, validating on ``eval_scenarios``; the models land in ``folder``;
    the agent starts from ``start`` where one is given."""
    torch.set_num_threads(config.torch_threads)
    card = _model_card(config, scenarios, tracking)
    venv = _training_env(config, scenarios)
    interruption: KeyboardInterrupt | None = None
    try:
        normalizer = slot_normalizer(venv, _gamma(config), config.normalize_reward)
        model = _build_model(config, normalizer, card.input_layout)
        if start is not None:
            log_std = dict(config.policy_kwargs).get("log_std_init")
            warm_start(model, normalizer, start, None if log_std is None else float(log_std))
        model.set_logger(_logger(folder, tracking))
        bar = ProgressBar(config.timesteps, enabled=progress)
        callbacks: list[BaseCallback] = [bar]
        if card.kind is JobKind.INFERENCE:
            callbacks.append(RolloutQoE())
        if config.critic_warmup:
            callbacks.append(CriticWarmUp(config.critic_warmup))
        validation = _validation(config, eval_scenarios, card, normalizer, folder, bar)
        if validation is not None:
            callbacks.append(validation)
        if config.imitation is not None:
            _imitate(model, normalizer, venv, config, bar, folder)
            hold_statistics(normalizer)  # the actor was fitted to them
        if validation is not None and (config.imitation is not None or start is not None):
            validation.init_callback(model)
            validation.validate()  # the imitated or the starting model may be the best
        interruption = _run_learning(model, config, callbacks, bar, validation)
        save_model(model, normalizer, card, folder / FINAL_MODEL_DIR)
        model.logger.close()
    finally:
        try:
            venv.close()
        except (EOFError, OSError):
            # Ctrl-C reaches subprocess environments too, and they may be gone already
            if interruption is None:
                raise
    return _training_result(training_id, folder, model, validation, tracking, interruption)


def _imitate(
    model: BaseAlgorithm,
    normalizer: VecNormalize,
    venv: VecEnv,
    config: TrainingConfig,
    bar: ProgressBar,
    folder: Path,
) -> None:
    """Fit the model to its teacher before reinforcement learning (:mod:`.imitation`), each
    round in the training's log and in ``imitation.json``."""
    assert config.imitation is not None
    rounds = imitate(
        model,
        normalizer,
        batched_under(venv),
        config.imitation,
        config.action_mapping,
        progress=bar.enabled,
    )
    for record in rounds:
        for key in ("samples", "loss", "limit_error"):
            model.logger.record(f"imitation/{key}", getattr(record, key))
        model.logger.dump(record.round)
    (folder / IMITATION_FILE).write_text(
        json.dumps([asdict(record) for record in rounds], indent=2) + "\n", encoding="utf-8"
    )


def _model_card(
    config: TrainingConfig, scenarios: Sequence[Scenario], tracking: TrainingTracking | None
) -> ModelCard:
    """What the saved model says of how it was trained and what it controls."""
    kind = scenarios[0].kind
    return ModelCard(
        algo=config.algo,
        kind=kind,
        trained_on=tuple(
            dict.fromkeys(
                ObservationLayout(layout.workers, layout.slots_per_worker, config.features)
                for layout in (layout_of(scenario) for scenario in scenarios)
            )
        ),
        actions=config.action_mapping,
        frame_stack=config.frame_stack,
        slot_agents=config.slot_agents,
        reward=config.reward or default_reward(kind),
        scenarios=tuple(scenario.name for scenario in scenarios),
        run_id=tracking.run_id if tracking is not None else None,
        dlsched_version=dlsched_version(),
        placer=config.placer,
    )


def _training_env(config: TrainingConfig, scenarios: Sequence[Scenario]) -> VecEnv:
    """The ``n_envs`` training environments, vectorised, their observations stacked if asked."""
    venv = make_vec_env(
        scenarios,
        config.n_envs,
        config.action_mapping,
        config.vec_env,
        config.backend,
        config.reward,
        config.slot_agents,
        config.own_weight,
        {"speed_spread": config.speed_spread} if config.speed_spread else {},
        config.placer,
    )
    if config.features != FEATURES:
        venv = SelectFeatures(venv, config.features)
    if config.frame_stack > 1:
        venv = VecFrameStack(venv, config.frame_stack, channels_order="last")
    return venv


def _logger(folder: Path, tracking: TrainingTracking | None) -> Logger:
    """SB3's logger: the progress file in ``folder``, and the run's metrics when tracked."""
    writers: list[KVWriter] = [CSVOutputFormat(str(folder / PROGRESS_FILE))]
    if tracking is not None:
        writers.append(
            MlflowKVWriter(
                tracking.client,
                tracking.run_id,
                on_failure=lambda failure: print(
                    f"warning: {failure}. Training goes on; every value is in "
                    f"{folder / PROGRESS_FILE}: upload it when the store answers with "
                    f"`dlsched runs sync {folder.resolve()}`",
                    file=sys.stderr,
                ),
            )
        )
    return Logger(str(folder), writers)


def _validation(
    config: TrainingConfig,
    eval_scenarios: Sequence[Scenario],
    card: ModelCard,
    normalizer: VecNormalize,
    folder: Path,
    bar: ProgressBar,
) -> Validation | None:
    """The callback that validates every ``eval_every`` timesteps; ``None`` when that is 0."""
    if not config.eval_every:
        return None
    return Validation(
        eval_scenarios,
        config.validation_seeds,
        config.eval_every,
        config.patience,
        card,
        normalizer,
        folder / BEST_MODEL_DIR,
        config.backend,
        report=lambda record: bar.note(
            f"validation {record.score:.3f}{' (best)' if record.improved else ''}"
        ),
    )


def _run_learning(
    model: BaseAlgorithm,
    config: TrainingConfig,
    callbacks: list[BaseCallback],
    bar: ProgressBar,
    validation: Validation | None,
) -> KeyboardInterrupt | None:
    """Learn for ``config.timesteps``, then validate the last model unless it just was.

    Returns:
        The interruption that stopped learning (its work is kept), ``None`` at a normal end.
    """
    try:
        model.learn(total_timesteps=config.timesteps, callback=CallbackList(callbacks))
    except KeyboardInterrupt as stopped:
        bar.close()
        return stopped  # keep the work: save and log it as at a normal end
    if validation is not None and not validation.stopped_early:
        last = validation.records[-1].timesteps if validation.records else -1
        if last != model.num_timesteps:
            validation.validate()  # the last model may be the best
    return None


def _training_result(
    training_id: str,
    folder: Path,
    model: BaseAlgorithm,
    validation: Validation | None,
    tracking: TrainingTracking | None,
    interruption: KeyboardInterrupt | None,
) -> TrainingResult:
    """The result of a training that learned into ``folder``, its validation history written."""
    best_folder = folder / BEST_MODEL_DIR
    model_folder = (
        best_folder if validation is not None and best_folder.is_dir() else folder / FINAL_MODEL_DIR
    )
    records = tuple(validation.records) if validation is not None else ()
    (folder / VALIDATION_FILE).write_text(
        json.dumps([asdict(record) for record in records], indent=2) + "\n", encoding="utf-8"
    )
    return TrainingResult(
        training_id=training_id,
        folder=folder,
        model_folder=model_folder,
        timesteps=model.num_timesteps,
        stopped_early=validation.stopped_early if validation is not None else False,
        validations=records,
        run_id=tracking.run_id if tracking is not None else None,
        experiment=tracking.experiment if tracking is not None else None,
        interruption=interruption,
    )


def _gamma(config: TrainingConfig) -> float:
    """The discount the algorithm will use (its own default unless set)."""
    given = dict(config.hyperparams).get("gamma")
    if given is not None:
        return float(given)
    default = inspect.signature(algorithm_class(config.algo)).parameters["gamma"].default
    return float(default)


def _build_model(
    config: TrainingConfig, env: VecNormalize, layout: ObservationLayout
) -> BaseAlgorithm:
    cls = algorithm_class(config.algo)
    policy: Any = config.policy_class()
    policy_kwargs = {"net_arch": list(config.net_arch), **dict(config.policy_kwargs)}
    if policy is SlotActorCriticPolicy:
        # its worker context, which the models saved without this keyword do not have
        policy_kwargs["slots_per_worker"] = layout.slots_per_worker
    # Checked against the algorithm's constructor by the config; SB3 types each one apart.
    hyperparams: dict[str, Any] = dict(config.hyperparams)
    try:
        return cls(
            policy,
            env,
            seed=config.seed,
            device="cpu",
            verbose=0,
            policy_kwargs=policy_kwargs,
            **hyperparams,
        )
    # SB3 asserts some of its constraints (PPO: n_steps * n_envs > 1) as it builds the model
    except (TypeError, ValueError, AssertionError) as error:
        raise PolicyError(
            f"{config.algo} refused the hyperparameters {dict(config.hyperparams)} or policy "
            f"keywords {policy_kwargs}: {error}; see the {cls.__name__} arguments in the "
            "Stable-Baselines3 documentation"
        ) from error


def register_model(client: MlflowClient, run_id: str, name: str) -> str:
    """Register the ``model/`` MLflow Model of training run ``run_id`` under ``name``.

    Returns:
        ``models:/<name>/<version>``, which ``dlsched evaluate --policy`` and
        ``mlflow.pyfunc.load_model`` take.
    """
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{client.get_run(run_id).info.artifact_uri}/{BEST_MODEL_DIR}"
    version = client.create_model_version(name, source, run_id=run_id)
    return f"models:/{name}/{version.version}"


def _finish_run(tracking: TrainingTracking, result: TrainingResult) -> None:
    client, run_id = tracking.client, tracking.run_id
    folder = result.folder
    mlflow_model = save_mlflow_model(result.model_folder, folder / MLFLOW_MODEL_DIR)
    client.log_artifacts(run_id, str(mlflow_model), BEST_MODEL_DIR)
    client.log_artifacts(run_id, str(folder / FINAL_MODEL_DIR), FINAL_MODEL_DIR)
    client.log_artifacts(run_id, str(folder / SCENARIO_DIR), SCENARIO_DIR)
    for name in (CONFIG_FILE, VALIDATION_FILE, PROGRESS_FILE, IMITATION_FILE):
        if (folder / name).is_file():
            client.log_artifact(run_id, str(folder / name))
    client.set_tag(run_id, "dlsched.stopped_early", str(result.stopped_early).lower())
    if result.interruption is not None:
        client.set_tag(run_id, "dlsched.interrupted", str(result.interruption) or "SIGINT")
    end_run(client, run_id, "KILLED" if result.interruption is not None else "FINISHED")
