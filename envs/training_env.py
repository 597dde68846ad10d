"""``dlsched/Training-v0``: CPU limits for deep-learning training jobs, to finish them sooner."""

from __future__ import annotations

from dlsched.envs.arguments import EnvironmentKind
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv


class _TrainingKind(EnvironmentKind):
    """The kind and defaults of dlsched/Training-v0, single and batched."""

    kind = JobKind.TRAINING
    env_id = "dlsched/Training-v0"
    default_scenario = "flowcon-10-random"
    default_reward = "active_jobs"


class TrainingEnv(_TrainingKind, SchedulingEnv):
    """Set the CPU limit of every training container so that jobs complete as early as possible,
    as FlowCon (journal, Section 4) and SpeCon do.

    Each job trains a model for a number of iterations and reports its loss after each one; the
    loss curve is the only sign of how much a job still gains from CPU.

    ## Action Space
    ``Box(0, 1, (workers * slots_per_worker,), float32)``: the CPU limit of the job in each slot,
    as a fraction of its worker's cores (``1`` means no cap), with the clipping rule of
    :class:`~dlsched.envs.inference_env.InferenceEnv`. :meth:`step_decision` also takes
    migrations: a migrated job keeps its progress and pauses for the scenario's migration cost.

    ## Observation Space
    ``Box(0, 1, (workers * slots_per_worker, 16), float32)`` with the columns of
    :data:`dlsched.envs.observation.FEATURES`; for training the informative ones are progress,
    progress rate, loss over first loss, limit and usage. Raw values are in
    ``info["telemetry"]``.

    ## Rewards
    The default, ``active_jobs``, is minus the number of unfinished jobs after each step, so an
    episode's return is minus the total completion time in intervals. ``progress`` is the
    alternative.

    ## Starting State
    The scenario's jobs are drawn from the seed; those arriving at time 0 are placed and start
    uncapped.

    ## Episode End
    Terminated when every job has arrived and finished (or failed); truncated at the horizon.

    ## Arguments
    As :class:`~dlsched.envs.inference_env.InferenceEnv`; the scenario must have training jobs.

    ## Version History
    - v0: initial version (``render_mode="human"`` added later; the dynamics are unchanged).
    """


class TrainingVectorEnv(_TrainingKind, SchedulingVectorEnv):
    """``dlsched/Training-v0`` batched: ``num_envs`` episodes of :class:`TrainingEnv` at once (see
    :mod:`dlsched.envs.scheduling_vector_env`)."""
