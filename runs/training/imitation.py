"""Learning a teacher's decisions before reinforcement learning: behaviour cloning, then DAgger.

The oracle (:mod:`dlsched.baselines.oracle`) reads the replay model's true profiles; a learned
scheduler reads telemetry only. A student network first learns what the teacher decides in the
states it sees, then PPO fine-tunes it (:func:`dlsched.runs.training.harness.train` with
:class:`~dlsched.runs.training.config.ImitationConfig`):

1. **Behaviour cloning** (round 0): the teacher drives the training environments and labels
   every state with its decision.
2. **DAgger** (Ross, Gordon and Bagnell, AISTATS 2011, Algorithm 3.1 with ``beta_i = 0`` after
   the first round): the student drives, and the teacher labels the states the student visits,
   which are the ones it must learn to leave; each round fits the student to every label
   gathered so far.

A label is the teacher's limits turned into the student's actions by the inverse of its action
mapping (:meth:`~dlsched.policies.agent_actions.ActionMapping.to_actions`); the fit is the mean
squared error between the student's mean action and the label over the slots that hold a job.
The observations are stored raw and normalised with the statistics reached at the end of each
round, so that the student is fitted to what it will see; after the last round the training
holds those statistics (:func:`~dlsched.policies.normalization.hold_statistics`), so that
reinforcement learning does not move the inputs the student was fitted on.

A copy of the teacher follows each training episode, told of its telemetry every step and reset
with the episode, so that a teacher with a memory (TRADL's tiers, FlowCon's lists) labels as it
would decide. Where it migrates jobs or places them, the student cannot follow: the labels are
its limits, on the placements the environment's own placer made.

The ``imitation`` package (HumanCompatibleAI) implements both algorithms, but its releases pin
Gymnasium 0.29 and Stable-Baselines3 2.2, and its experts map observations to actions, where the
oracle reads the episode's profiles; the loop here is small and runs on the batched environment.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from tqdm import tqdm

from dlsched.baselines import make
from dlsched.envs.decision_checks import decision_limits
from dlsched.envs.errors import PolicyError
from dlsched.policies.agent_actions import ActionMapping
from dlsched.policies.policy import HandcraftedPolicy
from dlsched.runs.training.batched_vec_env import BatchedVecEnv
from dlsched.runs.training.config import ImitationConfig


@dataclass(frozen=True)
class ImitationRound:
    """One round of imitation.

    Attributes:
        round: its index (0: behaviour cloning, driven by the teacher).
        samples: labelled observations gathered so far.
        loss: the mean squared error of the student's actions on them after the round's fit.
        limit_error: the mean absolute difference between the student's limits and the
            teacher's, as fractions of a worker, over the jobs of the states gathered in this
            round, before the round's fit (for round 0, those of the untrained student).
    """

    round: int
    samples: int
    loss: float
    limit_error: float


class Teachers:
    """One copy of a handcrafted teacher per episode of a batched training environment, and its
    decisions as the student's actions.

    Args:
        batched: the training environments.
        teacher: the teacher; it is copied per episode and bound to the episode's scenario.
        mapping: the student's action mapping.

    Raises:
        PolicyError: the teacher refuses a scenario (the oracle refuses a backend that does not
            run its jobs by the profiles it reads).
    """

    def __init__(
        self, batched: BatchedVecEnv, teacher: HandcraftedPolicy, mapping: ActionMapping
    ) -> None:
        self.batched = batched
        self.mapping = mapping
        self.copies: list[list[HandcraftedPolicy]] = []
        for part in batched.parts:
            copies = [teacher.copy() for _ in range(part.env.num_envs)]
            for copy in copies:
                copy.bind(part.env.scenario, part.env.backend.capabilities)
            self.copies.append(copies)

    def labels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The teacher's decision in every episode's newest state.

        Returns:
            ``(actions, limits, held)``, each ``(n_envs, slots)`` of the enclosing layout: the
            student's actions that set the teacher's limits, the limits themselves, and which
            slots hold a job (the only ones whose action reaches an environment).
        """
        layout = self.batched.layout
        shape = (self.batched.num_envs, layout.shape[0])
        actions = np.zeros(shape, dtype=np.float32)
        limits = np.zeros(shape, dtype=np.float32)
        held = np.zeros(shape, dtype=bool)
        for part, copies, raw in zip(
            self.batched.parts, self.copies, self.batched.raw_observations, strict=True
        ):
            env = part.env
            decisions = []
            for index, copy in enumerate(copies):
                copy.observe(env.telemetry(index))
                decisions.append(copy.decide())
            wanted = decision_limits(
                decisions, env.columns, env.layout.slots_per_worker, env.limit_floor
            )
            active = raw[..., env.layout.features.index("active")] > 0.5
            rows = np.ix_(np.arange(part.envs.start, part.envs.stop), part.rows)
            actions[rows] = self.mapping.to_actions(wanted, raw, env.layout)
            limits[rows] = wanted
            held[rows] = active
        return actions, limits, held

    def student_limits(self, actions: np.ndarray) -> np.ndarray:
        """The limits the student's ``actions`` (``(n_envs, slots)``) set in the newest states."""
        limits = np.zeros(actions.shape, dtype=np.float32)
        for part, raw in zip(self.batched.parts, self.batched.raw_observations, strict=True):
            own = actions[part.envs][:, part.rows]
            rows = np.ix_(np.arange(part.envs.start, part.envs.stop), part.rows)
            limits[rows] = self.mapping.to_limits(own, raw, part.env.layout)
        return limits

    def reset(self, done: np.ndarray) -> None:
        """Reset the copies of the episodes that ended (``done``, ``(n_envs,)``)."""
        for part, copies in zip(self.batched.parts, self.copies, strict=True):
            for index in np.flatnonzero(done[part.envs]).tolist():
                copies[index].reset()


def teacher_policy(config: ImitationConfig) -> HandcraftedPolicy:
    """The handcrafted policy ``config`` names (a baseline), with its parameters.

    Raises:
        UnknownNameError: no baseline has the name.
        PolicyError: a parameter the baseline does not take, or a bad value for one.
    """
    return make(config.teacher, **dict(config.teacher_params))


def imitate(
    model: BaseAlgorithm,
    normalizer: VecNormalize,
    batched: BatchedVecEnv,
    config: ImitationConfig,
    mapping: ActionMapping,
    report: Callable[[ImitationRound], None] | None = None,
    progress: bool = False,
) -> list[ImitationRound]:
    """Fit ``model``'s policy to the teacher's decisions, rounds as :mod:`this module
    <dlsched.runs.training.imitation>` says; the normaliser's statistics are updated as the
    states are gathered, and the policy's exploration set to ``config.log_std`` at the end.

    Args:
        model: an on-policy SB3 model (its policy an actor-critic) on ``normalizer``.
        normalizer: the training environments' normaliser (the top of their wrappers).
        batched: the batched environments under it.
        config: the rounds, steps and fit.
        mapping: the student's action mapping.
        report: called after each round.
        progress: show a bar of the steps gathered (on stderr).

    Raises:
        PolicyError: a policy that is not an actor-critic, or a teacher that refuses a scenario.
    """
    policy = model.policy
    if not isinstance(policy, ActorCriticPolicy):
        raise PolicyError(
            f"imitation fits an actor-critic policy (PPO, A2C), not {type(policy).__name__}"
        )
    teachers = Teachers(batched, teacher_policy(config), mapping)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    gathered: list[Gathered] = []
    rounds: list[ImitationRound] = []
    normalizer.reset()
    bar = tqdm(
        total=config.rounds * config.steps,
        desc=f"imitating {config.teacher}",
        unit="step",
        disable=not progress,
        file=sys.stderr,
    )
    for index in range(config.rounds):
        gathered.append(_gather(model, normalizer, teachers, config.steps, index == 0, bar.update))
        loss = _fit(policy, normalizer, optimizer, Gathered.joined(gathered), config)
        error = gathered[-1].limit_error
        record = ImitationRound(index, sum(len(g.labels) for g in gathered), loss, error)
        rounds.append(record)
        bar.set_postfix_str(f"round {index}: limit error {error:.3f}, loss {loss:.4f}")
        if report is not None:
            report(record)
    bar.close()
    _fit_critic(policy, normalizer, gathered, float(getattr(model, "gamma", 0.99)), config)
    with torch.no_grad():
        policy.log_std.fill_(config.log_std)
    return rounds


@dataclass(frozen=True)
class Gathered:
    """The states of one round, as steps of every environment (``steps * n_envs`` rows, step
    after step).

    Attributes:
        inputs: the raw observations as the student sees them (frames stacked, not normalised).
        labels: the teacher's decisions as the student's actions, per slot.
        held: the slots that hold a job.
        rewards: the reward of each step, normalised as the learner sees it.
        ended: whether the step ended its episode.
        after: the raw observation after the round's last step, per environment.
        limit_error: the student's mean absolute limit error on the round's states.
    """

    inputs: np.ndarray
    labels: np.ndarray
    held: np.ndarray
    rewards: np.ndarray
    ended: np.ndarray
    after: np.ndarray
    limit_error: float

    @staticmethod
    def joined(rounds: Sequence[Gathered]) -> Gathered:
        """Every round's labelled states as one (rewards and episode ends are per round)."""
        return Gathered(
            np.concatenate([r.inputs for r in rounds]),
            np.concatenate([r.labels for r in rounds]),
            np.concatenate([r.held for r in rounds]),
            np.concatenate([r.rewards for r in rounds]),
            np.concatenate([r.ended for r in rounds]),
            rounds[-1].after,
            float(np.mean([r.limit_error for r in rounds])),
        )


def _gather(
    model: BaseAlgorithm,
    normalizer: VecNormalize,
    teachers: Teachers,
    steps: int,
    by_teacher: bool,
    stepped: Callable[[int], object],
) -> Gathered:
    """``steps`` steps of every environment, driven by the teacher or the student, each state
    labelled by the teacher; ``stepped(1)`` after each."""
    observations = normalizer.get_original_obs()
    inputs, labels, masks, rewards, ended, errors = [], [], [], [], [], []
    for _ in range(steps):
        wanted, teacher_limits, held = teachers.labels()
        normalized = normalizer.normalize_obs(observations)
        student, _ = model.predict(normalized, deterministic=True)
        student = np.asarray(student, dtype=np.float32)
        gap = np.abs(teachers.student_limits(student) - teacher_limits)[held]
        errors.append(float(gap.mean()) if gap.size else 0.0)
        inputs.append(np.asarray(observations, dtype=np.float32))
        labels.append(wanted)
        masks.append(held)
        _, reward, done, _ = normalizer.step(wanted if by_teacher else student)
        rewards.append(np.asarray(reward, dtype=np.float32))
        ended.append(np.asarray(done, dtype=bool))
        teachers.reset(done)
        observations = normalizer.get_original_obs()
        stepped(1)
    return Gathered(
        np.concatenate(inputs),
        np.concatenate(labels),
        np.concatenate(masks),
        np.concatenate(rewards),
        np.concatenate(ended),
        np.asarray(observations, dtype=np.float32),
        float(np.mean(errors)),
    )


def _fit(
    policy: ActorCriticPolicy,
    normalizer: VecNormalize,
    optimizer: torch.optim.Optimizer,
    gathered: Gathered,
    config: ImitationConfig,
) -> float:
    """``config.epochs`` passes of mean squared error between the policy's mean actions and
    the ``gathered`` labels over the slots that hold a job; the last pass's mean loss."""
    raw = gathered.inputs
    inputs = torch.as_tensor(np.asarray(normalizer.normalize_obs(raw), dtype=np.float32))
    targets = torch.as_tensor(gathered.labels)
    weights = torch.as_tensor(gathered.held, dtype=torch.float32)
    policy.set_training_mode(True)
    generator = torch.Generator().manual_seed(len(raw))
    last = 0.0
    for _ in range(config.epochs):
        order = torch.randperm(len(raw), generator=generator)
        total, count = 0.0, 0
        for start in range(0, len(order), config.batch_size):
            batch = order[start : start + config.batch_size]
            held = weights[batch]
            if held.sum() == 0:
                continue
            mean = _mean_actions(policy, inputs[batch])
            loss = (((mean - targets[batch]) ** 2) * held).sum() / held.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
            count += len(batch)
        last = total / max(count, 1)
    policy.set_training_mode(False)
    return last


def _fit_critic(
    policy: ActorCriticPolicy,
    normalizer: VecNormalize,
    rounds: Sequence[Gathered],
    gamma: float,
    config: ImitationConfig,
) -> None:
    """Fit the critic to the discounted returns of the gathered steps before reinforcement
    learning starts: an untrained critic's advantages are noise, and PPO's first updates on
    them undo much of what the actor imitated (measured: a validation score of 0.558 after
    imitation fell to 0.455 after one PPO update). Each round's returns are summed backwards
    from its last step, where the critic's own value of the next state stands for the rest
    (a few sweeps, so that this tail settles), and cut at every episode's end."""
    envs = len(rounds[0].after)
    critic = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    inputs = [
        torch.as_tensor(np.asarray(normalizer.normalize_obs(r.inputs), dtype=np.float32))
        for r in rounds
    ]
    tails = [
        torch.as_tensor(np.asarray(normalizer.normalize_obs(r.after), dtype=np.float32))
        for r in rounds
    ]
    generator = torch.Generator().manual_seed(envs)
    for _ in range(_CRITIC_SWEEPS):
        returns = []
        with torch.no_grad():
            for tail, gathered in zip(tails, rounds, strict=True):
                following = policy.predict_values(tail).flatten().numpy()
                rewards = gathered.rewards.reshape(-1, envs)
                ended = gathered.ended.reshape(-1, envs)
                steps = np.zeros_like(rewards)
                for step in range(len(rewards) - 1, -1, -1):
                    following = rewards[step] + gamma * np.where(ended[step], 0.0, following)
                    steps[step] = following
                returns.append(torch.as_tensor(steps.reshape(-1)))
        features = torch.cat(inputs)
        targets = torch.cat(returns)
        policy.set_training_mode(True)
        for _ in range(config.epochs):
            order = torch.randperm(len(targets), generator=generator)
            for start in range(0, len(order), config.batch_size):
                batch = order[start : start + config.batch_size]
                values = policy.predict_values(features[batch]).flatten()
                loss = torch.nn.functional.mse_loss(values, targets[batch])
                critic.zero_grad()
                loss.backward()
                critic.step()
        policy.set_training_mode(False)


#: Sweeps of the critic's fit: each settles the value its returns' tails stand on.
_CRITIC_SWEEPS = 3


def _mean_actions(policy: ActorCriticPolicy, observations: torch.Tensor) -> torch.Tensor:
    """The policy's mean action per slot for ``observations`` (normalised)."""
    distribution = policy.get_distribution(observations).distribution
    assert isinstance(distribution, torch.distributions.Normal), "a Gaussian policy"
    return distribution.mean


def batched_under(venv: VecEnv) -> BatchedVecEnv:
    """The :class:`BatchedVecEnv` under ``venv``'s wrappers.

    Raises:
        PolicyError: ``venv`` is not made of one (imitation runs on the batched environment).
    """
    inner: VecEnv = venv
    while not isinstance(inner, BatchedVecEnv):
        nested = getattr(inner, "venv", None)
        if nested is None:
            raise PolicyError(
                "imitation runs on the batched replay environment; train with --vec-env "
                "batched (or auto) on the replay backend"
            )
        inner = nested
    return inner


def rounds_summary(rounds: Sequence[ImitationRound]) -> str:
    """The rounds in one line each, for the training's log."""
    return "\n".join(
        f"imitation round {r.round}: {r.samples} samples, loss {r.loss:.4f}, "
        f"limit error {r.limit_error:.4f}"
        for r in rounds
    )
