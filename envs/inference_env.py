"""``dlsched/Inference-v0``: CPU limits for inference services with latency targets."""

from __future__ import annotations

from dlsched.envs.arguments import EnvironmentKind
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv


class _InferenceKind(EnvironmentKind):
    """The kind and defaults of dlsched/Inference-v0, single and batched."""

    kind = JobKind.INFERENCE
    env_id = "dlsched/Inference-v0"
    default_scenario = "dqoes-varied-burst"
    default_reward = "satisfied"


class InferenceEnv(_InferenceKind, SchedulingEnv):
    """Set the CPU limit of every inference container so that as many as possible meet their
    latency targets, as DQoES does (journal version, Sections III-IV).

    Each job is a container answering batches of images in a loop; it reports the latency of
    every batch it completes. A job is *satisfied* (DQoES's set S) when its last batch latency is
    within ``[(1 - alpha) o, (1 + alpha) o]`` of its target ``o``; faster is G, slower is B.

    ## Action Space
    ``Box(0, 1, (workers * slots_per_worker,), float32)``: the CPU limit of the job in each slot,
    as a fraction of its worker's cores (``1`` means no cap). Entries of empty slots are ignored.
    Values above 1 are clipped to 1; values below the floor (``limit_floor``, default 0.02,
    negative values included) are raised to the floor. The first action with entries outside
    ``[0, 1]`` warns once (:class:`~dlsched.envs.errors.ActionClippedWarning`): clipping is right
    for an agent's raw output, but not for limits given in cores. A NaN or infinite entry, or an
    array of another shape, raises :class:`~dlsched.envs.errors.ActionError`. Limits of a worker
    may sum above 1: Docker quotas may overcommit, and the CPU is then shared by the kernel.
    :meth:`step_decision` takes a typed :class:`~dlsched.envs.decision.Decision` (limits by job
    id, migrations) instead.

    ## Observation Space
    ``Box(0, 1, (workers * slots_per_worker, 16), float32)``: one row per slot, the columns of
    :data:`dlsched.envs.observation.FEATURES` (active, limit, CPU usage, last latency over target,
    target, DQoES class, age, load of the worker, ...), all computed from telemetry. Raw values
    are in ``info["telemetry"]``, a :class:`~dlsched.envs.telemetry.Telemetry`.

    ## Rewards
    ``reward=`` names a function of :mod:`dlsched.envs.rewards`; the default, ``satisfied``, is
    the number of satisfied jobs after the step. ``satisfied_fraction`` and ``qoe_gap`` (DQoES
    Eq. 2) are the alternatives for inference; ``satisfied_closeness`` gives partial credit near
    the target; ``satisfied_fraction_cores`` charges the cores the limits hold (a quarter of the
    satisfied fraction for the whole cluster's), so that an agent learns to satisfy as many
    services with fewer cores.

    ## Starting State
    The scenario's jobs are drawn from the seed; those arriving at time 0 are placed (by the
    placer, Docker Swarm's spread by default) and start uncapped. No job has a latency yet.

    ## Episode End
    The episode is truncated when simulated (replay) or wall-clock (Docker) time reaches the
    scenario's horizon; services never terminate on their own.

    ## Arguments
    - ``scenario``: a shipped scenario's name (``dlsched scenarios`` lists them), a path to a
      YAML file, or a :class:`~dlsched.envs.scenarios.model.Scenario`; it must have inference jobs.
    - ``backend``: ``"replay"`` (default, deterministic) or ``"docker"``, or a Backend object.
    - ``reward``: a reward name or a function ``(now, before) -> float``.
    - ``interval_s``: seconds per step, overriding the scenario's (the papers' IV).
    - ``placer``: the :class:`~dlsched.envs.placement.Placer` for arriving jobs.
    - ``limit_floor``: the lowest limit, a fraction of a worker in ``(0, 1]``.
    - ``backend_options``: keyword arguments of the backend's constructor.
    - ``render_mode``: ``"ansi"`` (a text table of the jobs at every ``render()``),
      ``"human"`` (that table printed at every ``reset`` and ``step``) or ``"rgb_array"`` (the
      episode's latency/loss and limit panels as an image); ``None`` (default) renders nothing.
      See :mod:`dlsched.envs.rendering`.

    ## Version History
    - v0: initial version (``render_mode="human"`` added later; the dynamics are unchanged).
    """


class InferenceVectorEnv(_InferenceKind, SchedulingVectorEnv):
    """``dlsched/Inference-v0`` batched: ``num_envs`` episodes of :class:`InferenceEnv` at once (see
    :mod:`dlsched.envs.scheduling_vector_env`)."""
