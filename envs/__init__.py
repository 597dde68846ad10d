"""dlsched.envs: the scheduling environments, their scenarios, backends and workloads.

Importing it registers the environments with Gymnasium::

    import gymnasium as gym
    import dlsched.envs  # noqa: F401

    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")

Subpackages: :mod:`dlsched.envs.scenarios` (the scenario model and its files),
:mod:`dlsched.envs.replay` (the replay backend and its workload profiles),
:mod:`dlsched.envs.docker` (the Docker backend) and :mod:`dlsched.envs.workloads` (the PyTorch
programs the containers run). What a user needs is re-exported here.
"""

from gymnasium.envs.registration import register

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.backend_registry import BACKENDS, backend_class, make_backend
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Decision, Migration, Placement
from dlsched.envs.episode_batch import EpisodeBatch
from dlsched.envs.errors import (
    ActionError,
    ArgumentError,
    BackendError,
    DlschedError,
    DockerUnavailableError,
    ImageMissingError,
    MissingExtraError,
    ModelError,
    OutputError,
    PolicyError,
    ProfileError,
    ResetNeededError,
    ScenarioError,
    TrackingError,
    UnexpectedArgumentError,
    UnknownNameError,
)
from dlsched.envs.inference_env import InferenceEnv, InferenceVectorEnv
from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.envs.placement import LeastWorkPlacer, Placer, SpreadPlacer
from dlsched.envs.rewards import REWARDS, RewardFn, reward_function, telemetry_reward
from dlsched.envs.scenarios import JobKind, Scenario, load_scenario, scenario_names
from dlsched.envs.telemetry import JobState, JobTelemetry, QoEClass, Telemetry, WorkerTelemetry
from dlsched.envs.telemetry_columns import TelemetryColumns
from dlsched.envs.training_env import TrainingEnv, TrainingVectorEnv

# Without Gymnasium's passive checker: it marks its first reset as checked before the reset runs,
# so a first reset refused for its seed left it holding no observation, and the next step
# failed inside it. The tests run Gymnasium's full check_env on both environments instead.
# vector_entry_point: gym.make_vec(...) returns the natively batched environment
# (dlsched.envs.scheduling_vector_env); vectorization_mode="sync" or "async" steps single ones.
register(
    id="dlsched/Inference-v0",
    entry_point="dlsched.envs.inference_env:InferenceEnv",
    disable_env_checker=True,
    vector_entry_point="dlsched.envs.inference_env:InferenceVectorEnv",
)
register(
    id="dlsched/Training-v0",
    entry_point="dlsched.envs.training_env:TrainingEnv",
    disable_env_checker=True,
    vector_entry_point="dlsched.envs.training_env:TrainingVectorEnv",
)

__all__ = [
    "BACKENDS",
    "FEATURES",
    "REWARDS",
    "ActionError",
    "ArgumentError",
    "Backend",
    "BackendCapabilities",
    "BackendError",
    "ControlledEpisode",
    "Decision",
    "DlschedError",
    "DockerUnavailableError",
    "EpisodeBatch",
    "ImageMissingError",
    "InferenceEnv",
    "InferenceVectorEnv",
    "JobKind",
    "JobState",
    "JobTelemetry",
    "LeastWorkPlacer",
    "Migration",
    "MissingExtraError",
    "ModelError",
    "ObservationLayout",
    "OutputError",
    "Placement",
    "Placer",
    "PolicyError",
    "ProfileError",
    "QoEClass",
    "ResetNeededError",
    "RewardFn",
    "Scenario",
    "ScenarioError",
    "SpreadPlacer",
    "Telemetry",
    "TelemetryColumns",
    "TrackingError",
    "TrainingEnv",
    "TrainingVectorEnv",
    "UnexpectedArgumentError",
    "UnknownNameError",
    "WorkerTelemetry",
    "backend_class",
    "load_scenario",
    "make_backend",
    "reward_function",
    "scenario_names",
    "telemetry_reward",
]
