"""An actor-critic network that shares its weights across slots, for PPO and A2C.

Every slot of a dlsched observation describes one job with the same features, and every entry of
the action is that job's limit. A plain MLP over the flattened ``(slots, features)`` array must
learn the same control rule once per slot, and learns nothing for a slot that is rarely used. This
network instead applies one small network to every row (Deep Sets, Zaheer et al. 2017):

- each row is encoded by a shared MLP into an embedding ``e_i``;
- a context pools the embeddings (mean and max) of the rows of slot ``i``'s worker, ``w_i``,
  and of the whole cluster, ``c``: a job's limit depends on the other jobs of its worker (how
  many compete for its cores, how loaded it is), and on the other workers (where a job could go);
- the actor maps ``[e_i, w_i, c]`` through a shared MLP and a shared linear output to the mean
  of slot ``i``'s action; the Gaussian's log standard deviation is one parameter shared by all
  slots;
- the critic maps the pooled context of its own row encoder to the value.

Nothing in the network has the size of a layout: the same weights act on any number of workers
and slots per worker (:meth:`SlotActorCriticPolicy.fit_layout` tells it the layout it acts on),
and the actions follow any permutation of the jobs over a worker's slots, and of the workers.

Trained across layouts, it reads observations padded to one layout enclosing them all, whose
absent rows are NaN (:mod:`dlsched.envs.observation`): an absent row enters no pooling, of its
worker or of the cluster (an absent worker counts in no cluster context), and an absent slot's
action counts neither in the log-probability nor in the entropy (:class:`SlotGaussian`), its
environment never receiving it.
Every present slot thus gets the action, the log-probability and the value it gets unpadded,
and the model acts on any layout unpadded afterwards. An empty slot (a row of zeros) is present.

Models saved before this network (their policy keywords have no ``slots_per_worker``) load as
they were trained: one context ``c`` pooled over all rows, ``[e_i, c]``, a log standard
deviation per slot. On another layout than their own, their context is their worker's if they
were trained on one worker (the cluster's otherwise), and their slots share the mean of their
log standard deviations.

:class:`OwnSlotPolicy` is the same network for per-slot agents
(:mod:`dlsched.runs.training.slot_agents`):
its input is one slot's view, the observation with that slot's row first (:func:`own_rows_first`),
and it outputs that slot's action and value from ``[e_0, c]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from dlsched.envs.errors import PolicyError
from dlsched.policies.agent_actions import AGENT_HIGH, AGENT_LOW

#: Hidden sizes of the row encoders and heads when ``net_arch`` is not given.
DEFAULT_HIDDEN: tuple[int, ...] = (64, 64)


def _mlp(sizes: Sequence[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size_in, size_out in itertools.pairwise(sizes):
        layers += [nn.Linear(size_in, size_out), activation()]
    return nn.Sequential(*layers)


def _pool(rows: torch.Tensor, present: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Mean and max along ``dim`` of the ``present`` rows: ``(batch, slots, width) ->
    (batch, 2 * width)`` for ``dim`` 1; both 0 where no row is present."""
    weights = present.unsqueeze(-1).to(rows.dtype)
    count = weights.sum(dim=dim)
    mean = (rows * weights).sum(dim=dim) / count.clamp(min=1.0)
    peak = rows.masked_fill(~present.unsqueeze(-1), -torch.inf).amax(dim=dim)
    return torch.cat([mean, torch.where(count > 0, peak, 0.0)], dim=-1)


def _pool_per_worker(
    rows: torch.Tensor, present: torch.Tensor, slots_per_worker: int
) -> torch.Tensor:
    """Each row's worker's mean and max: ``(batch, slots, width) -> (batch, slots, 2 * width)``,
    the rows of a worker being ``slots_per_worker`` consecutive ones."""
    batch, slots, width = rows.shape
    workers = slots // slots_per_worker
    pooled = _pool(
        rows.reshape(batch, workers, slots_per_worker, width),
        present.reshape(batch, workers, slots_per_worker),
        dim=2,
    )
    return pooled.repeat_interleave(slots_per_worker, dim=1)


class _RowEncoders(nn.Module):
    """What both extractors share: row encoders for the actor and the critic, and the actor's mix.

    Subclasses add the critic's last layer and say how rows become latents. The attribute names
    are those of the state dicts that saved models hold.

    Args:
        slots: rows of the observation it is built for (SB3 sizes its outputs from them).
        features: columns of the observation.
        hidden: widths of the row encoders' layers; the last is the embedding width.
        activation: the activation between layers.
        contexts: the pooled contexts the actor mixes with a row's embedding (each is a mean
            and a max).
    """

    def __init__(
        self,
        slots: int,
        features: int,
        hidden: Sequence[int],
        activation: type[nn.Module],
        contexts: int = 1,
    ) -> None:
        super().__init__()
        self.slots = slots
        self.features = features
        self.width = hidden[-1]
        self.actor_rows = _mlp([features, *hidden], activation)
        self.actor_mix = _mlp([(1 + 2 * contexts) * self.width, self.width], activation)
        self.critic_rows = _mlp([features, *hidden], activation)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _rows(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(batch, slots * features) -> (batch, slots, features)``, for any number of slots,
        absent rows (NaN) as zeros, and which rows are present, ``(batch, slots)``."""
        rows = features.reshape(features.shape[0], -1, self.features)
        present = ~rows.isnan().any(dim=2)
        return torch.where(present.unsqueeze(2), rows, 0.0), present


class SlotExtractor(_RowEncoders):
    """The actor's per-slot latents and the critic's pooled latent (SB3's ``mlp_extractor``).

    Args: as :class:`_RowEncoders`, and:
        slots_per_worker: the slots of one worker, whose rows are consecutive; ``None`` builds
            the network of models saved before the worker context, whose one context pools
            :attr:`context_slots` rows (all of them, until told otherwise).
    """

    def __init__(
        self,
        slots: int,
        features: int,
        hidden: Sequence[int],
        activation: type[nn.Module],
        slots_per_worker: int | None,
    ) -> None:
        super().__init__(slots, features, hidden, activation, 1 if slots_per_worker is None else 2)
        self.critic_head = _mlp([2 * self.width, self.width], activation)
        # SB3 reads these to size the action and value outputs; a slot's latent is its mix and
        # its presence (see forward_actor)
        self.latent_dim_pi = slots * (self.width + 1)
        self.latent_dim_vf = self.width
        #: whether the actor pools the cluster besides each row's worker
        self.cluster_context = slots_per_worker is not None
        #: the rows each row's first context pools: its worker's (or all rows, see above)
        self.context_slots = slots if slots_per_worker is None else slots_per_worker

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        """Each slot's latent: its mix of contexts, then 1 if it is present, 0 if absent (the
        action distribution leaves absent slots out, :class:`SlotGaussian`)."""
        inputs, present = self._rows(features)
        rows = self.actor_rows(inputs)
        contexts = [rows, _pool_per_worker(rows, present, self.context_slots)]
        if self.cluster_context:
            contexts.append(_pool(rows, present).unsqueeze(1).expand(-1, rows.shape[1], -1))
        mixed = self.actor_mix(torch.cat(contexts, dim=2))
        return torch.cat([mixed, present.unsqueeze(2).to(mixed.dtype)], dim=2).flatten(1)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        inputs, present = self._rows(features)
        return self.critic_head(_pool(self.critic_rows(inputs), present))


def own_rows_first(observation: np.ndarray) -> np.ndarray:
    """Each slot's view: ``(..., slots, features) -> (..., slots, slots, features)``, where view
    ``i`` is the observation rolled so that row ``i`` comes first."""
    slots = observation.shape[-2]
    return np.stack([np.roll(observation, -i, axis=-2) for i in range(slots)], axis=-3)


class OwnSlotExtractor(_RowEncoders):
    """Latents of one slot's view for its own action and value (SB3's ``mlp_extractor``).

    Args: as :class:`_RowEncoders`; the first row is the agent's own.
    """

    def __init__(
        self, slots: int, features: int, hidden: Sequence[int], activation: type[nn.Module]
    ) -> None:
        super().__init__(slots, features, hidden, activation)
        self.critic_mix = _mlp([3 * self.width, self.width], activation)
        self.latent_dim_pi = self.width
        self.latent_dim_vf = self.width

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self._own(features, self.actor_rows, self.actor_mix)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self._own(features, self.critic_rows, self.critic_mix)

    def _own(self, features: torch.Tensor, rows: nn.Module, mix: nn.Module) -> torch.Tensor:
        inputs, present = self._rows(features)
        encoded = rows(inputs)
        return mix(torch.cat([encoded[:, 0], _pool(encoded, present)], dim=1))


def _latent_rows(latent: torch.Tensor, width: int) -> torch.Tensor:
    """The actor's latent per slot, ``(batch, slots * (width + 1)) -> (batch, slots, width + 1)``:
    a slot's mix of contexts, then its presence (:meth:`SlotExtractor.forward_actor`)."""
    return latent.reshape(latent.shape[0], -1, width + 1)


class SlotActionHead(nn.Module):
    """One linear output shared by every slot: ``(batch, slots * (width + 1)) -> (batch,
    slots)``, from each slot's mix of contexts."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.linear = nn.Linear(width, 1)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.linear(_latent_rows(latent, self.width)[..., : self.width]).squeeze(-1)


class SlotGaussian(DiagGaussianDistribution):
    """SB3's diagonal Gaussian over the slots' actions, whose log-probability and entropy sum
    over the present slots only: an absent slot's action reaches no environment, so it must
    weigh neither in PPO's probability ratio nor in its entropy bonus."""

    def __init__(self, action_dim: int) -> None:
        super().__init__(action_dim)
        self.present: torch.Tensor | None = None

    def of_slots(
        self, mean_actions: torch.Tensor, log_std: torch.Tensor, present: torch.Tensor
    ) -> SlotGaussian:
        """The distribution of ``mean_actions`` (``(batch, slots)``) whose slots ``present``
        (1 or 0, ``(batch, slots)``) count."""
        self.proba_distribution(mean_actions, log_std)
        self.present = present
        return self

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        assert self.present is not None, "of_slots was not called"
        return (self.distribution.log_prob(actions) * self.present).sum(dim=1)

    def entropy(self) -> torch.Tensor:
        assert self.present is not None, "of_slots was not called"
        return (self.distribution.entropy() * self.present).sum(dim=1)


#: What the slot network's refusal of other observations suggests.
_NOT_SLOT_ROWS = "; use network 'mlp' for other environments"


def _slot_rows(observation_space: spaces.Space, who_needs: str, hint: str = "") -> tuple[int, int]:
    """The (slots, features) shape of ``observation_space``, which ``who_needs``."""
    shape = observation_space.shape
    if shape is None or len(shape) != 2:
        raise PolicyError(f"{who_needs} observations of shape (slots, features), got {shape}{hint}")
    return (shape[0], shape[1])


def _hidden_widths(net_arch: list[int] | None, who: str) -> list[int]:
    """The row encoders' hidden widths ``net_arch`` asks of ``who`` (default ``[64, 64]``)."""
    hidden = list(net_arch) if net_arch else list(DEFAULT_HIDDEN)
    if not all(isinstance(width, int) and width > 0 for width in hidden):
        raise PolicyError(
            f"net_arch {net_arch!r} of {who} must be a list of positive widths, e.g. [64, 64]"
        )
    return hidden


class _RowEncoderPolicy(ActorCriticPolicy):
    """What both policies share: an SB3 actor-critic policy whose ``mlp_extractor`` is one of
    the row encoders above, built with the hidden widths ``net_arch`` gives.

    Subclasses name the extractor and who they are (for messages), and check the spaces.
    """

    #: The row encoders the policy builds (unless it builds them itself).
    extractor: type[_RowEncoders]
    #: What the policy is called in the messages of :func:`_hidden_widths`.
    who: str

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        self._check_spaces(observation_space, action_space, kwargs)
        hidden = _hidden_widths(net_arch, self.who)
        super().__init__(observation_space, action_space, lr_schedule, net_arch=hidden, **kwargs)

    def _check_spaces(
        self, observation_space: spaces.Space, action_space: spaces.Space, kwargs: dict[str, Any]
    ) -> None:
        """Raise :class:`PolicyError` unless the spaces (and ``ActorCriticPolicy``'s other
        arguments, ``kwargs``) are ones this policy takes."""
        raise NotImplementedError

    def _build_mlp_extractor(self) -> None:
        shape = self.observation_space.shape
        assert shape is not None and isinstance(self.net_arch, list)
        # SB3 annotates its MlpExtractor but uses only the interface the row encoders provide
        self.mlp_extractor = self.extractor(  # type: ignore[assignment]
            shape[0], shape[1], self.net_arch, self.activation_fn
        )


class SlotActorCriticPolicy(_RowEncoderPolicy):
    """SB3's actor-critic policy with the slot-shared network of the module docstring.

    It takes ``ActorCriticPolicy``'s arguments, and ``slots_per_worker``: the slots of one
    worker of the training environment, which builds the network of the module docstring
    (``None``, as in the keywords of models saved before it: the network those were trained
    with). ``net_arch`` is a list of hidden widths of the row encoders (default ``[64, 64]``).
    The observation space must be ``Box(slots, features)`` and the action space ``Box(slots,)``;
    gSDE is not supported. :meth:`fit_layout` sets it to act on another layout.
    """

    who = "the slot network"

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | None = None,
        slots_per_worker: int | None = None,
        **kwargs: Any,
    ) -> None:
        shape = _slot_rows(observation_space, "the slot network needs", _NOT_SLOT_ROWS)
        if slots_per_worker is not None and (slots_per_worker < 1 or shape[0] % slots_per_worker):
            raise PolicyError(
                f"slots_per_worker={slots_per_worker} does not divide the observation's "
                f"{shape[0]} slots into workers; give the scenario's slots_per_worker"
            )
        # read by _build_mlp_extractor, which the parent's constructor calls
        self.slots_per_worker = slots_per_worker
        super().__init__(observation_space, action_space, lr_schedule, net_arch, **kwargs)

    def _check_spaces(
        self, observation_space: spaces.Space, action_space: spaces.Space, kwargs: dict[str, Any]
    ) -> None:
        shape = _slot_rows(observation_space, "the slot network needs", _NOT_SLOT_ROWS)
        if action_space.shape != (shape[0],):
            raise PolicyError(
                f"the slot network needs one action per slot: action shape "
                f"{action_space.shape} != ({shape[0]},)"
            )
        if kwargs.get("use_sde"):
            raise PolicyError("the slot network does not support gSDE (use_sde); leave it off")

    def _build_mlp_extractor(self) -> None:
        shape = self.observation_space.shape
        assert shape is not None and isinstance(self.net_arch, list)
        # SB3 annotates its MlpExtractor but uses only the interface the row encoders provide
        self.mlp_extractor = SlotExtractor(  # type: ignore[assignment]
            shape[0], shape[1], self.net_arch, self.activation_fn, self.slots_per_worker
        )

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        # The parent built one Linear over all slots' latents; replace it by the shared head.
        assert isinstance(self.action_dist, DiagGaussianDistribution)
        extractor = self.mlp_extractor
        assert isinstance(extractor, SlotExtractor)
        self.action_dist = SlotGaussian(self.action_dist.action_dim)
        self.action_net = SlotActionHead(extractor.width)
        if self.ortho_init:
            self.action_net.apply(partial(self.init_weights, gain=0.01))
        if extractor.cluster_context:
            # one exploration noise for every slot, so that no parameter has a layout's size
            self.log_std = nn.Parameter(torch.full((1,), float(self.log_std_init)))
        # the optimizer classes SB3 takes all accept lr; the base class's signature does not say so
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        mean_actions = self.action_net(latent_pi)
        log_std: torch.Tensor = self.log_std
        if len(log_std) not in (1, mean_actions.shape[-1]):
            # a model saved with one log std per slot, on a layout of another slot count
            log_std = log_std.mean().reshape(1)
        extractor = self.mlp_extractor
        assert isinstance(self.action_dist, SlotGaussian) and isinstance(extractor, SlotExtractor)
        present = _latent_rows(latent_pi, extractor.width)[..., -1]
        return self.action_dist.of_slots(mean_actions, log_std, present)

    def fit_layout(self, workers: int, slots_per_worker: int, trained_workers: int) -> None:
        """Act on observations of ``workers`` x ``slots_per_worker`` slots from now on.

        Args:
            workers: the workers of the layout.
            slots_per_worker: the slots of each.
            trained_workers: the workers of the layout the model was trained on; a model
                saved before the worker context pools its one context over a worker's slots
                if it was trained on one worker, over all slots otherwise.
        """
        slots = workers * slots_per_worker
        columns = self.observation_space.shape
        assert columns is not None
        self.observation_space = spaces.Box(0.0, 1.0, (slots, columns[1]), dtype=np.float32)
        self.action_space = spaces.Box(AGENT_LOW, AGENT_HIGH, (slots,), dtype=np.float32)
        extractor = self.mlp_extractor
        assert isinstance(extractor, SlotExtractor)
        per_worker = extractor.cluster_context or trained_workers == 1
        extractor.context_slots = slots_per_worker if per_worker else slots


class OwnSlotPolicy(_RowEncoderPolicy):
    """SB3's actor-critic policy for one slot's view (:class:`OwnSlotExtractor`): observation
    ``Box(slots, features)`` with the agent's row first, action ``Box(1,)``.

    It takes ``ActorCriticPolicy``'s arguments; ``net_arch`` is a list of hidden widths of the
    row encoders (default ``[64, 64]``).
    """

    extractor = OwnSlotExtractor
    who = "per-slot agents"

    def _check_spaces(
        self, observation_space: spaces.Space, action_space: spaces.Space, kwargs: dict[str, Any]
    ) -> None:
        _slot_rows(observation_space, "per-slot agents need")
        if action_space.shape != (1,):
            raise PolicyError(
                f"a per-slot agent sets one limit: action shape {action_space.shape} != (1,)"
            )
