"""The configuration of a training run, apart from the training itself.

``dlsched train`` builds its parser from :class:`TrainingConfig`'s and :class:`RllibConfig`'s
defaults and these names, so this module imports neither torch, Stable-Baselines3, MLflow nor
Ray: ``dlsched train --help`` and a mistyped option answer at once. :mod:`.harness` and
:mod:`.rllib` train from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dlsched.baselines import make as make_baseline
from dlsched.envs.errors import PolicyError, UnknownNameError
from dlsched.envs.observation import FEATURES
from dlsched.envs.placement import PLACERS
from dlsched.envs.size_bounds import SizeBound
from dlsched.policies.agent_actions import ActionMapping, ActionMode

if TYPE_CHECKING:
    from stable_baselines3.common.policies import BasePolicy

#: First seed of the validation episodes; far from any seed a user trains with.
VALIDATION_SEED_BASE = 1_000_000
#: Networks an agent can have: ``slot`` shares weights across slots (PPO, A2C only).
NETWORKS: tuple[str, ...] = ("auto", "slot", "mlp")
#: Algorithms whose policy is SB3's ActorCriticPolicy, which the slot network extends.
ON_POLICY: tuple[str, ...] = ("ppo", "a2c")
#: The SB3 algorithms dlsched trains, by the name ``--algo`` takes (the keys of
#: :data:`dlsched.policies.learned.ALGORITHMS`, which maps them to their classes).
ALGORITHM_NAMES: tuple[str, ...] = ("ppo", "a2c", "sac", "td3")

HyperValue = float | int | str | bool

MAX_TIMESTEPS = SizeBound("MAX_TIMESTEPS", 100_000_000, "timesteps of a training")
"""Environment steps of one training: a day or more on a few cores (``docs/limits.md``), and a
line of the progress file per rollout."""
MAX_ENVS = SizeBound("MAX_ENVS", 256, "environments stepped side by side")
"""``n_envs``: each holds its episode, and SB3 keeps a rollout of observations per environment
(``docs/limits.md`` says what 256 take)."""


#: The default ``max_step`` of relative and usage actions: a limit at most doubled or halved a step.
RELATIVE_MAX_STEP = 2.0
#: The default ``max_step`` of the share modes: weights from 1/64 to 64, so that one job's share of
#: its worker runs from almost none to almost all, and ``share-idle`` can hold most of a worker
#: back (at 2, three services' weights of at least 0.5 each always gave their worker away whole).
SHARE_MAX_STEP = 64.0


@dataclass(frozen=True)
class ImitationConfig:
    """Learning a teacher's decisions before reinforcement learning
    (:mod:`dlsched.runs.training.imitation`).

    Attributes:
        teacher: the handcrafted policy learned from, by name (``oracle``: the privileged one).
        teacher_params: the teacher's parameters (``(("frugal", True),)``: the oracle that
            leaves the cores no satisfied service needs idle); the baseline's defaults otherwise.
        rounds: rounds of gathering states and fitting them; the first follows the teacher
            (behaviour cloning), the later ones the student (DAgger: the teacher labels the
            states the student visits).
        steps: steps of every training environment per round.
        epochs: passes over every label gathered so far, per round.
        batch_size: labelled observations per gradient step.
        learning_rate: Adam's learning rate for the fit.
        log_std: the log standard deviation of the actions reinforcement learning starts from,
            around the imitated ones.
    """

    teacher: str
    teacher_params: tuple[tuple[str, HyperValue], ...] = ()
    rounds: int = 4
    steps: int = 64
    epochs: int = 6
    batch_size: int = 1024
    learning_rate: float = 1e-3
    log_std: float = -1.5

    def problems(self) -> list[str]:
        """What makes this configuration one that cannot run."""
        problems = []
        for name in ("rounds", "steps", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"imitation {name}={getattr(self, name)} must be at least 1")
        if not self.learning_rate > 0:
            problems.append(f"imitation learning_rate={self.learning_rate} must be > 0")
        try:  # the teacher is built when imitation starts, after the environments: refuse now
            make_baseline(self.teacher, **dict(self.teacher_params))
        except (UnknownNameError, PolicyError) as error:
            problems.append(f"teacher {self.teacher!r}: {error}")
        return problems


class VecEnvKind(StrEnum):
    """How the training environments of one run are stepped."""

    AUTO = "auto"  # batched for the replay backend where it can, else dummy; subproc for real
    BATCHED = "batched"  # natively batched replay environments, one per scenario, stepped at once
    DUMMY = "dummy"  # all in this process, one after the other
    SUBPROC = "subproc"  # one process each, stepped in parallel


@dataclass(frozen=True)
class TrainingConfig:
    """Everything that defines a training run (logged as ``training_config.json``).

    Attributes:
        algo: the SB3 algorithm: ``ppo``, ``a2c``, ``sac`` or ``td3``.
        scenarios: the training scenarios, by shipped name or YAML path; several are mixed,
            one drawn per episode.
        timesteps: environment steps to train for (PPO and A2C round up to whole rollouts).
        n_envs: environments stepped side by side.
        seed: seeds the agent's initialisation and the training environments' first resets.
        eval_scenarios: validation scenarios (default: the training scenarios).
        eval_episodes: validation episodes per scenario, on held-out seeds.
        eval_every: timesteps between validations; 0 validates never.
        patience: validations in a row without improvement that stop training; 0 never stops.
        reward: the reward's name (``None``: the environment's default).
        backend: the backend's registered name.
        network: ``slot`` (shared across slots; PPO, A2C), ``mlp``, or ``auto`` (slot when
            possible).
        net_arch: hidden layer widths of the network.
        actions: how the agent's actions become limits (see
            :mod:`dlsched.policies.agent_actions`).
        max_step: the largest factor one relative action changes a limit by; in the share
            modes, the weights span ``1 / max_step`` to ``max_step``. ``None``:
            :data:`SHARE_MAX_STEP` for the share modes, 2 for the others.
        speed_spread: on replay, the coefficient of variation of each workload's speed per
            training episode (:class:`~dlsched.envs.replay.backend.ReplayBackend`), so that the
            agent meets many host speeds; validation runs the profiles as measured.
        frame_stack: consecutive observations the agent sees at once (1: the current one);
            a batch latency stays the same until the next batch ends, and only a history
            shows whether it is new and which limits it ran under.
        slot_agents: make every slot an agent of one shared policy, rewarded for its own job
            too (:mod:`dlsched.runs.training.slot_agents`); timesteps then count slot steps.
        own_weight: with ``slot_agents``, the weight of an agent's own job in its reward.
        hyperparams: keyword arguments of the SB3 algorithm (``learning_rate``, ``n_steps``, ...).
        policy_kwargs: keyword arguments of its policy (``log_std_init``, ``ortho_init``, ...).
        normalize_reward: scale rewards by the running deviation of returns while training.
        vec_env: how environments are stepped (``auto``, ``dummy``, ``subproc``).
        torch_threads: threads torch may use in this process.
        features: the observation's features the agent reads, by name
            (:data:`~dlsched.envs.observation.FEATURES`, all by default), in that order.
        imitation: learn a teacher's decisions first (``None``: reinforcement learning only).
        placer: the placer of arriving jobs, by name (:data:`~dlsched.envs.placement.
            PLACERS`): the training environments place with it, and the model brings it.
        init_from: a trained model the agent starts from, its weights and observation
            statistics (a folder, a ``runs:/`` or ``models:/`` URI, ``pretrained:<name>``;
            :mod:`dlsched.runs.training.warm_start`); ``None`` starts from scratch.
        critic_warmup: the first timesteps whose updates train the critic alone, the actor's
            parameters held (PPO, A2C; :class:`~dlsched.runs.training.warm_start.
            CriticWarmUp`).
    """

    algo: str
    scenarios: tuple[str, ...]
    timesteps: int
    n_envs: int = 1
    seed: int = 0
    eval_scenarios: tuple[str, ...] = ()
    eval_episodes: int = 5
    eval_every: int = 10_000
    patience: int = 5
    reward: str | None = None
    backend: str = "replay"
    network: str = "auto"
    net_arch: tuple[int, ...] = (64, 64)
    actions: ActionMode = ActionMode.RELATIVE
    max_step: float | None = None
    frame_stack: int = 1
    speed_spread: float = 0.0
    slot_agents: bool = False
    own_weight: float = 0.5
    hyperparams: tuple[tuple[str, HyperValue], ...] = ()
    policy_kwargs: tuple[tuple[str, HyperValue], ...] = ()
    normalize_reward: bool = True
    vec_env: VecEnvKind = VecEnvKind.AUTO
    torch_threads: int = 1
    features: tuple[str, ...] = FEATURES
    imitation: ImitationConfig | None = None
    placer: str = "spread"
    init_from: str | None = None
    critic_warmup: int = 0

    @property
    def training_seeds(self) -> tuple[int, ...]:
        """The ``reset`` seeds of the training environments' first episodes."""
        return tuple(range(self.seed, self.seed + self.n_envs))

    @property
    def validation_seeds(self) -> tuple[int, ...]:
        """The held-out ``reset`` seeds of every validation."""
        return tuple(range(VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + self.eval_episodes))

    @property
    def action_mapping(self) -> ActionMapping:
        """The map from the agent's actions to limits."""
        return ActionMapping(self.actions, self.resolved_max_step)

    @property
    def resolved_max_step(self) -> float:
        """``max_step``, or its default for the action mode."""
        if self.max_step is not None:
            return self.max_step
        return SHARE_MAX_STEP if self.actions.shares else RELATIVE_MAX_STEP

    @property
    def resolved_network(self) -> str:
        """``slot`` or ``mlp``."""
        if self.network == "auto":
            return "slot" if self.algo in ON_POLICY else "mlp"
        return self.network

    def policy_class(self) -> type[BasePolicy]:
        """The SB3 policy class the model is built with (``policy_kwargs`` are its keywords)."""
        # imported here: it loads SB3 and torch, which the command line's parser does not need
        from dlsched.policies.learned import policy_class

        return policy_class(self.algo, self.resolved_network, self.slot_agents)

    def check(self) -> None:
        """Refuse a configuration that cannot run, naming the value and the fix.

        Raises:
            PolicyError: a bad value.
        """
        # imported here: they load SB3 and torch, which the command line's parser does not need
        from dlsched.policies.hyperparameters import (
            hyperparameter_problems,
            policy_keyword_problems,
        )
        from dlsched.policies.learned import algorithm_class

        self.check_size()
        algorithm_class(self.algo)
        problems = []
        if self.eval_every < 0:
            problems.append(f"eval_every={self.eval_every} must be >= 0 (0: no validation)")
        if self.eval_every and self.eval_episodes < 1:
            problems.append(f"eval_episodes={self.eval_episodes} must be at least 1")
        if self.patience < 0:
            problems.append(f"patience={self.patience} must be >= 0 (0: never stop early)")
        if self.network not in NETWORKS:
            problems.append(f"network={self.network!r} must be one of {', '.join(NETWORKS)}")
        elif self.resolved_network == "slot" and self.algo not in ON_POLICY:
            problems.append(
                f"network 'slot' extends the actor-critic policy of {', '.join(ON_POLICY)}, not "
                f"{self.algo}; use network 'mlp' with {self.algo}"
            )
        if not self.net_arch or any(width < 1 for width in self.net_arch):
            problems.append(f"net_arch={list(self.net_arch)} must be positive widths, e.g. 64,64")
        if self.actions is not ActionMode.ABSOLUTE and not self.resolved_max_step > 1:
            problems.append(f"max_step={self.max_step} must be > 1")
        if not 0.0 <= self.own_weight <= 1.0:
            problems.append(f"own_weight={self.own_weight} must be in [0, 1]")
        if not 0.0 <= self.speed_spread < 1.0:
            problems.append(f"speed_spread={self.speed_spread} must be in [0, 1)")
        elif self.speed_spread and self.backend != "replay":
            problems.append(
                f"speed_spread={self.speed_spread} draws replay's speeds; backend "
                f"{self.backend!r} runs at its host's own"
            )
        if self.frame_stack < 1:
            problems.append(f"frame_stack={self.frame_stack} must be at least 1")
        problems += _feature_problems(self.features)
        if self.placer not in PLACERS:
            problems.append(f"placer={self.placer!r} must be one of {', '.join(PLACERS)}")
        if self.actions.shares and self.slot_agents:
            problems.append(
                f"actions {self.actions.value!r} split a worker among its jobs; per-slot agents "
                "each set their own limit: use --actions usage with --slot-agents"
            )
        if self.imitation is not None:
            problems += self.imitation.problems()
            if self.slot_agents or self.backend != "replay" or self.resolved_network != "slot":
                problems.append(
                    "imitation learns on the batched replay environment with the slot network "
                    "of one agent: drop --slot-agents, use --backend replay and --network slot"
                )
        if self.torch_threads < 1:
            problems.append(f"torch_threads={self.torch_threads} must be at least 1")
        if self.critic_warmup < 0:
            problems.append(f"critic_warmup={self.critic_warmup} must be >= 0 (0: none)")
        elif self.critic_warmup and self.algo not in ON_POLICY:
            problems.append(
                f"critic_warmup={self.critic_warmup} holds the actor of an actor-critic "
                f"({', '.join(ON_POLICY)}), not {self.algo}; drop --critic-warmup"
            )
        problems += hyperparameter_problems(self.algo, dict(self.hyperparams))
        overlap = set(self.training_seeds) & set(self.validation_seeds)
        if self.eval_every and overlap:
            problems.append(
                f"training seeds {sorted(overlap)} are also validation seeds; train with "
                f"--seed below {VALIDATION_SEED_BASE - self.n_envs + 1}"
            )
        network_builds = self.network in NETWORKS and not (
            self.resolved_network == "slot" and self.algo not in ON_POLICY
        )
        if network_builds:
            problems += policy_keyword_problems(self.policy_class(), dict(self.policy_kwargs))
        _refuse(problems, "training configuration")

    def check_size(self) -> None:
        """Refuse a training of no steps or above its limits (:data:`MAX_TIMESTEPS`,
        :data:`MAX_ENVS`); it imports nothing, so a command refuses one at once.

        Raises:
            PolicyError: a bad size.
        """
        _refuse(_size_problems(self.timesteps, self.n_envs), "training configuration")

    def to_data(self) -> dict[str, Any]:
        """The configuration as plain JSON data."""
        data = asdict(self)
        data["hyperparams"] = dict(self.hyperparams)
        data["policy_kwargs"] = dict(self.policy_kwargs)
        data["vec_env"] = self.vec_env.value
        data["actions"] = self.actions.value
        data["training_seeds"] = list(self.training_seeds)
        data["validation_seeds"] = list(self.validation_seeds)
        data["features"] = list(self.features)
        if self.imitation is not None:
            data["imitation"]["teacher_params"] = dict(self.imitation.teacher_params)
        data["resolved_network"] = self.resolved_network
        return data


def _feature_problems(features: tuple[str, ...]) -> list[str]:
    """What is wrong with a list of features an agent reads."""
    unknown = [name for name in features if name not in FEATURES]
    if unknown:
        return [f"features {unknown} are not observed; known features: {', '.join(FEATURES)}"]
    if not features or len(set(features)) != len(features):
        return [f"features {list(features)} must name at least one feature, each once"]
    return []


def _size_problems(timesteps: int, n_envs: int) -> list[str]:
    """What is wrong with a training's size, on either engine: ``timesteps`` environment steps
    in all, ``n_envs`` environments stepped side by side; both at least 1 and within
    :data:`MAX_TIMESTEPS` and :data:`MAX_ENVS`."""
    problems = []
    if timesteps < 1:
        problems.append(f"timesteps={timesteps} must be at least 1")
    elif MAX_TIMESTEPS.exceeded(timesteps):
        problems.append(f"timesteps={timesteps:,}: expected {MAX_TIMESTEPS.expected()}")
    if n_envs < 1:
        problems.append(f"n_envs={n_envs} must be at least 1")
    elif MAX_ENVS.exceeded(n_envs):
        problems.append(f"n_envs={n_envs:,}: expected {MAX_ENVS.expected()}")
    return problems


def _refuse(problems: list[str], what: str) -> None:
    """Raise ``problems`` of a configuration of ``what``, if any, as one error.

    Raises:
        PolicyError: naming every problem.
    """
    if problems:
        raise PolicyError(f"invalid {what}: " + "; ".join(problems))


@dataclass(frozen=True)
class RllibConfig:
    """Everything that defines a training on RLlib (logged as ``training_config.json``).

    Attributes:
        scenario: the training scenario, by shipped name or YAML path (one: the batched
            environment runs one scenario).
        timesteps: environment steps to train for, rounded up to whole training iterations.
        num_envs: episodes each env runner steps at once in its batched environment.
        env_runners: Ray actors that sample besides the driver; 0 samples in the driver.
        seed: seeds the network's initialisation and the environments.
        reward: the reward's name (``None``: the environment's default).
        net_arch: hidden layer widths of the policy and of the value network.
        hyperparams: keyword arguments of RLlib's ``PPOConfig.training`` (``lr``,
            ``train_batch_size_per_learner``, ``minibatch_size``, ``num_epochs``, ...).
        address: the Ray cluster to join (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``);
            ``None`` starts a Ray instance on loopback for this training.
        num_cpus: the CPUs of that local instance (ignored with ``address``).
        torch_threads: threads torch may use in the driver.
    """

    scenario: str
    timesteps: int
    num_envs: int = 8
    env_runners: int = 0
    seed: int = 0
    reward: str | None = None
    net_arch: tuple[int, ...] = (64, 64)
    hyperparams: tuple[tuple[str, HyperValue], ...] = ()
    address: str | None = None
    num_cpus: int = 2
    torch_threads: int = 1

    def check(self) -> None:
        """Refuse a configuration that cannot run, naming the value and the fix.

        Raises:
            PolicyError: a bad value.
        """
        problems = _size_problems(self.timesteps, self.num_envs)
        if self.env_runners < 0:
            problems.append(f"env_runners={self.env_runners} must be >= 0 (0: in the driver)")
        if self.num_cpus < 1:
            problems.append(f"num_cpus={self.num_cpus} must be at least 1")
        if self.address is None and self.env_runners + 1 > self.num_cpus:
            problems.append(
                f"env_runners={self.env_runners} need {self.env_runners + 1} CPUs with the "
                f"driver, but the local Ray has num_cpus={self.num_cpus}; raise --num-cpus or "
                "lower --env-runners"
            )
        if not self.net_arch or any(width < 1 for width in self.net_arch):
            problems.append(f"net_arch={list(self.net_arch)} must be positive widths, e.g. 64,64")
        if self.torch_threads < 1:
            problems.append(f"torch_threads={self.torch_threads} must be at least 1")
        _refuse(problems, "RLlib training configuration")

    def to_data(self) -> dict[str, Any]:
        """The configuration as plain JSON data."""
        data = asdict(self)
        data["hyperparams"] = dict(self.hyperparams)
        return data
