"""Starting a training from a trained model, and holding its actor while the critic learns.

``dlsched train --init-from MODEL`` starts the agent from a model already trained (a folder, a
``runs:/`` or ``models:/`` URI, or a shipped ``pretrained:<name>``): its weights, and its
observation statistics, held as they are (the actor reads every input through them). A shipped
scheduler can so be fine-tuned under another reward (``satisfied_fraction_cores``, which charges
the cores it holds) or on a host's own scenarios, without imitating its teacher again.

The model must be one the configuration would build: the same algorithm, network, action
mapping, frame stack, features, per-slot agents and placer (its card says) and the same hidden
widths (its weights say). Each difference is refused with the option that fixes it, before any
environment is built. The slot network reads any layout, so the model may have been trained on
other layouts than the new scenarios'.

``--critic-warmup N`` (PPO, A2C) holds the actor's parameters for the updates of the first N
timesteps, so that only the value function learns. A model whose actor was imitated
(:mod:`.imitation`) or trained under another reward starts with a critic that does not value its
returns: its advantages are then noise, and the first policy updates move the actor away from
what it knew. With the actor held, the actions are unchanged until the critic has learned the
returns of the policy it starts from.
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import VecNormalize

from dlsched.envs.errors import PolicyError
from dlsched.envs.scenarios.model import JobKind
from dlsched.policies.learned import LearnedPolicy
from dlsched.policies.normalization import ObservationNormalizer, hold_statistics
from dlsched.runs.training.config import TrainingConfig


def load_start(spec: str, tracking_uri: str | None) -> LearnedPolicy:
    """The trained model ``spec`` names, to start a training from.

    Args:
        spec: a model folder or its ``model.zip``, a ``runs:/`` or ``models:/`` URI, or
            ``pretrained:<name>``.
        tracking_uri: the store of an MLflow URI (by default ``dlsched evaluate``'s).

    Raises:
        PolicyError: ``spec`` names a baseline, or no model that loads.
        UnknownNameError: an unknown ``pretrained:`` name.
    """
    # imported here: the specs module reaches MLflow, which a training without --init-from
    # does not need before it tracks
    from dlsched.runs.policy_specs import is_model_spec, resolve_policy

    if not is_model_spec(spec):
        raise PolicyError(
            f"--init-from {spec!r} names no trained model; give a model folder that `dlsched "
            "train` wrote, a runs:/<run_id>/model URI or a pretrained:<name> (`dlsched "
            "baselines` lists them); to learn from a baseline, use --imitate"
        )
    start = resolve_policy(spec, tracking_uri=tracking_uri)
    assert isinstance(start, LearnedPolicy)  # a model spec resolves to a trained model
    return start


def check_start(start: LearnedPolicy, config: TrainingConfig, kind: JobKind) -> None:
    """Refuse a model that the configuration would not build, naming each difference.

    Args:
        start: the model to start from.
        config: the training's configuration.
        kind: the kind of jobs of its scenarios.

    Raises:
        PolicyError: every difference, with the option that removes it.
    """
    card, source = start.card, start.source
    mapping = config.action_mapping
    pairs = (
        ("job kind", card.kind.value, kind.value, f"{card.kind.value} scenarios"),
        ("algorithm", card.algo, config.algo, f"--algo {card.algo}"),
        ("network", card.network, config.resolved_network, f"--network {card.network}"),
        (
            "actions",
            f"{card.actions.mode.value} (max step {card.actions.max_step:g})",
            f"{mapping.mode.value} (max step {mapping.max_step:g})",
            f"--actions {card.actions.mode.value} --max-step {card.actions.max_step:g}",
        ),
        ("frame stack", card.frame_stack, config.frame_stack, f"--frame-stack {card.frame_stack}"),
        (
            "per-slot agents",
            card.slot_agents,
            config.slot_agents,
            ("add" if card.slot_agents else "drop") + " --slot-agents",
        ),
        ("placer", card.placer, config.placer, f"--placer {card.placer}"),
    )
    problems = [
        f"its {what} {theirs} != the training's {ours} (use {fix})"
        for what, theirs, ours, fix in pairs
        if theirs != ours
    ]
    if card.features != config.features:
        extra = [name for name in config.features if name not in card.features]
        lacking = [name for name in card.features if name not in config.features]
        difference = ", ".join(
            part
            for part in (
                f"the training's add {','.join(extra)}" if extra else "",
                f"the training's lack {','.join(lacking)}" if lacking else "",
            )
            if part
        )
        problems.append(
            f"its features are not the training's ({difference or 'another order'}; use "
            f"--features {','.join(card.features)})"
        )
    if (card.actions.low, card.actions.high) != (mapping.low, mapping.high):
        problems.append(
            f"its limits span [{card.actions.low:g}, {card.actions.high:g}], the training's "
            f"[{mapping.low:g}, {mapping.high:g}]"
        )
    if problems:
        raise PolicyError(
            f"--init-from {source}: the model does not match the training: " + "; ".join(problems)
        )


def warm_start(
    model: BaseAlgorithm,
    normalizer: VecNormalize,
    start: LearnedPolicy,
    log_std: float | None = None,
) -> None:
    """Give ``model`` the weights of ``start``, and ``normalizer`` its observation statistics,
    held (:func:`~dlsched.policies.normalization.hold_statistics`).

    Args:
        model: the agent, built as the configuration says (:func:`check_start` passed).
        normalizer: its training normaliser (:func:`~dlsched.policies.normalization.
            slot_normalizer`); its reward scaling goes on learning.
        start: the model to start from.
        log_std: the log standard deviation of the actions to explore with, in place of the
            model's (``--policy-kwarg log_std_init=``); ``None`` keeps the model's. A model whose
            deterministic actions hit a narrow band (a latency target) may lose most of what it
            satisfies under the noise it was imitated with, and PPO then learns the noisy
            policy, not the model.

    Raises:
        PolicyError: the weights have other shapes (hidden widths), naming both.
    """
    ours, theirs = model.policy.state_dict(), start.model.policy.state_dict()
    differences = [
        f"{name}: {tuple(theirs[name].shape)} != {tuple(ours[name].shape)}"
        for name in ours
        if name in theirs and theirs[name].shape != ours[name].shape
    ]
    missing = sorted(set(ours) ^ set(theirs))
    if differences or missing:
        shown = differences[:3] + [f"{name} in one only" for name in missing[:3]]
        raise PolicyError(
            f"--init-from {start.source}: its weights do not fit the network the training "
            f"builds ({'; '.join(shown)}); pass the model's own --net-arch (hidden widths) "
            "and --policy-kwarg settings"
        )
    model.policy.load_state_dict(theirs)
    if log_std is not None:
        noise = getattr(model.policy, "log_std", None)
        if not isinstance(noise, torch.nn.Parameter):
            raise PolicyError(
                f"log_std_init={log_std} sets the exploration of a Gaussian actor, which "
                f"{type(model).__name__}'s policy has not; drop --policy-kwarg log_std_init"
            )
        with torch.no_grad():
            noise.fill_(log_std)
    if isinstance(start.normalizer, ObservationNormalizer):
        hold_statistics(normalizer, start.normalizer)


def actor_parameters(policy: ActorCriticPolicy) -> list[torch.nn.Parameter]:
    """The parameters of ``policy`` that its value does not depend on: the actor's own.

    Found by differentiating the value of an observation, so that any actor-critic network
    (the slot network, SB3's MLP) answers without a list of its layers' names.
    """
    space = policy.observation_space
    observation = np.zeros((1, *(space.shape or ())), dtype=np.float32)
    policy.zero_grad(set_to_none=True)
    tensor, _ = policy.obs_to_tensor(observation)
    policy.predict_values(tensor).sum().backward()
    actor = [parameter for parameter in policy.parameters() if parameter.grad is None]
    policy.zero_grad(set_to_none=True)
    return actor


class CriticWarmUp(BaseCallback):
    """Hold the actor's parameters for the updates of the first ``timesteps``: only the critic
    learns, and the actions stay those the training started from (see the module docstring).

    Args:
        timesteps: the timesteps whose rollouts train the critic alone; an update whose rollout
            ends past them trains both.
    """

    def __init__(self, timesteps: int) -> None:
        super().__init__()
        self.timesteps = timesteps
        self._held: list[torch.nn.Parameter] = []

    @property
    def holding(self) -> bool:
        """Whether the actor is held now."""
        return bool(self._held)

    def _on_training_start(self) -> None:
        policy = self.model.policy
        assert isinstance(policy, ActorCriticPolicy)  # the configuration refuses the others
        if self.num_timesteps < self.timesteps:
            self._held = actor_parameters(policy)
            for parameter in self._held:
                parameter.requires_grad_(False)

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        # called after a rollout and before the update it feeds
        if self.holding and self.num_timesteps > self.timesteps:
            self._release()

    def _on_training_end(self) -> None:
        self._release()

    def _release(self) -> None:
        for parameter in self._held:
            parameter.requires_grad_(True)
        self._held = []
