"""Learned schedulers: a Stable-Baselines3 model behind the :class:`~dlsched.policies.Policy`
interface, so that evaluation, metrics and comparison treat it exactly like a baseline.

A trained model is a folder of three files, written by :func:`save_model` (``dlsched train`` logs
it as the MLflow artifact ``model``):

- ``model.zip``: the SB3 model (``PPO.save`` and friends);
- ``normalizer.json``: the observation statistics it was trained with
  (:mod:`dlsched.policies.normalization`);
- ``dlsched-model.json``: the :class:`ModelCard`: algorithm, job kind, and the features the
  model reads (names and order), which are its contract with an environment, beside the layouts
  it was trained on; and the network and the values SB3 pickles into ``model.zip``, as data.

Every file is data: :func:`load_model` unpickles nothing (:mod:`dlsched.policies.sb3_archive`
gives SB3 each pickled entry's value from the card; weights are read with
``weights_only=True``). A folder saved by dlsched 0.1.0 (``vec_normalize.pkl``, card format 3
or earlier) is refused with the command that converts it once
(:mod:`dlsched.policies.conversion`); see ``docs/security.md``.

The agent acts in ``[-1, 1]`` per slot (SB3's convention for continuous actions);
:class:`LearnedPolicy` turns that into limits by the card's
:class:`~dlsched.policies.agent_actions.ActionMapping`, the one its training environments used.
A model of the slot network (:mod:`dlsched.policies.slot_network`) acts on any layout of its
features, whatever the workers and slots per worker it was trained on; any other network (an
MLP, per-slot agents) only on the layout it was trained on. An environment it cannot act on is
refused with both layouts in the message.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import numpy as np
from stable_baselines3 import A2C, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecNormalize
from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

from dlsched.envs.errors import DlschedError, ModelError, PolicyError, UnknownNameError
from dlsched.envs.observation import ObservationLayout, enclosing_layout
from dlsched.envs.placement import PLACERS, Placer, placer_named
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies.agent_actions import AGENT_HIGH, AGENT_LOW, ActionMapping
from dlsched.policies.cards import card_data
from dlsched.policies.model_files import (
    CARD_FILE,
    DATA_CARD_FORMAT,
    MODEL_FILE,
    NORMALIZER_FILE,
    model_files,
    not_a_model,
    refuse_pickled_model,
)
from dlsched.policies.normalization import load_normalizer, save_normalizer
from dlsched.policies.policy import ParamValue, Policy
from dlsched.policies.sb3_archive import archive_objects, load_archive
from dlsched.policies.slot_network import OwnSlotPolicy, SlotActorCriticPolicy, own_rows_first

if TYPE_CHECKING:
    from dlsched.envs.backend import BackendCapabilities

#: Version of the model card's format; a reader refuses a newer one. Format 1 held the
#: features inside its ``layout``; format 2 holds them on their own, and the layout the model was
#: trained on as ``trained_on``; format 3 lists in ``trained_on`` every layout it was trained on;
#: format 4 (:data:`~dlsched.policies.model_files.DATA_CARD_FORMAT`) records the ``network`` and
#: the values of ``model.zip``'s pickled entries (``sb3_objects``), and its folder keeps the
#: statistics as JSON: the first whose folder loads without unpickling anything; it also
#: names the placer of arriving jobs the model was trained with (``placer``).
CARD_FORMAT = DATA_CARD_FORMAT

#: The SB3 algorithms dlsched trains, by the name ``--algo`` takes.
ALGORITHMS: Mapping[str, type[BaseAlgorithm]] = {"ppo": PPO, "a2c": A2C, "sac": SAC, "td3": TD3}
#: The networks a model is built with (``--network``): ``slot``, the slot network of
#: :mod:`dlsched.policies.slot_network`; ``mlp``, the algorithm's own ``MlpPolicy``.
MODEL_NETWORKS: tuple[str, ...] = ("slot", "mlp")
#: What an SB3 algorithm's ``load`` raises on a file it cannot read: SB3 asserts what it finds
#: in the zip and builds the model of it, so whatever it raises on a damaged or tampered file
#: means the file is not a model it can read (``UnpicklingError``: a pickle that nothing
#: rebuilds, or a .pth holding more than tensors, which weights_only refuses).
SB3_LOAD_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    RuntimeError,
    AssertionError,
    EOFError,
    pickle.UnpicklingError,
)
#: What loading a model folder's archive raises on a file that is not a model: SB3's load
#: errors, and a ``model.zip`` that is not a zip.
_ARCHIVE_LOAD_ERRORS: tuple[type[Exception], ...] = (*SB3_LOAD_ERRORS, zipfile.BadZipFile)


def algorithm_class(name: str) -> type[BaseAlgorithm]:
    """The SB3 class of an algorithm name (``ppo``, ``a2c``, ``sac``, ``td3``)."""
    if name not in ALGORITHMS:
        raise UnknownNameError("algorithm", name, ALGORITHMS)
    return ALGORITHMS[name]


def policy_class(algo: str, network: str, slot_agents: bool) -> type[BasePolicy]:
    """The SB3 policy class of a model: its algorithm's, of the network (one of
    :data:`MODEL_NETWORKS`), for per-slot agents or not. A card names it so (rather than SB3's
    pickle of the class) that a model loads without unpickling.

    Raises:
        UnknownNameError: an algorithm dlsched does not train.
        ModelError: a network that is none of :data:`MODEL_NETWORKS`.
    """
    cls = algorithm_class(algo)
    if network == "slot":
        return OwnSlotPolicy if slot_agents else SlotActorCriticPolicy
    if network == "mlp":
        mlp: type[BasePolicy] = cls.policy_aliases["MlpPolicy"]
        return mlp
    raise ModelError(f"network {network!r} is not one of {', '.join(MODEL_NETWORKS)}")


def network_of(model: BaseAlgorithm, card: ModelCard) -> str:
    """The name (:data:`MODEL_NETWORKS`) of ``model``'s network, as :func:`policy_class` builds
    it for ``card``'s algorithm and agents.

    Raises:
        ModelError: the model's policy is no class dlsched builds for such a card.
    """
    built = type(model.policy)
    for network in MODEL_NETWORKS:
        if policy_class(card.algo, network, card.slot_agents) is built:
            return network
    raise ModelError(
        f"the model's policy is a {built.__module__}.{built.__qualname__}, which no network "
        f"dlsched builds for a {card.algo} model{' of per-slot agents' if card.slot_agents else ''}"
        f" ({', '.join(MODEL_NETWORKS)}); a model of another network cannot be saved as data"
    )


def describe_layout(layout: ObservationLayout) -> str:
    """A layout in one line: workers, slots and the feature columns."""
    return describe_layouts((layout,))


def describe_layouts(layouts: Sequence[ObservationLayout]) -> str:
    """Layouts of the first one's features in one line: workers and slots of each, and the
    feature columns."""
    features = layouts[0].features
    shapes = ", ".join(
        f"{layout.workers} worker(s) x {layout.slots_per_worker} slots" for layout in layouts
    )
    return f"{shapes}, {len(features)} features ({', '.join(features)})"


@dataclass(frozen=True)
class ModelCard:
    """What a trained model needs to be used again.

    Attributes:
        algo: the SB3 algorithm (a key of :data:`ALGORITHMS`).
        kind: the kind of jobs it schedules.
        trained_on: the observation layouts it was trained on, one or more: their features
            (the same) are the ones the model reads; their workers and slots are where it was
            trained. Several were padded to :attr:`input_layout` in training.
        actions: how its actions become limits.
        frame_stack: how many consecutive observations it sees at once (SB3's
            ``VecFrameStack`` along the feature axis; 1: the current one only).
        slot_agents: whether it is a per-slot agent (one action per view of
            :func:`~dlsched.policies.slot_network.own_rows_first`) rather than one agent
            setting every slot's limit.
        reward: the reward it was trained with.
        scenarios: the training scenarios, by name.
        run_id: the MLflow run that trained it, if tracked.
        dlsched_version: the dlsched version that trained it.
        network: its network, one of :data:`MODEL_NETWORKS` (:func:`policy_class`); ``""`` in
            a card of format 3 or earlier, which does not say. :func:`save_model` records it.
        sb3_objects: the JSON value of each entry SB3 pickled into ``model.zip`` that the
            layout does not determine (``policy_kwargs``, ``clip_range``, ...: the codecs of
            :mod:`dlsched.policies.sb3_archive`), which loading gives SB3 instead of
            unpickling it. :func:`save_model` records them.
        placer: the placer of arriving jobs it was trained with and brings where it runs
            (a name of :data:`~dlsched.envs.placement.PLACERS`).
    """

    algo: str
    kind: JobKind
    trained_on: tuple[ObservationLayout, ...]
    actions: ActionMapping = field(default_factory=ActionMapping)
    frame_stack: int = 1
    slot_agents: bool = False
    reward: str = ""
    scenarios: tuple[str, ...] = ()
    run_id: str | None = None
    dlsched_version: str = ""
    network: str = ""
    sb3_objects: Mapping[str, Any] = field(default_factory=dict)
    placer: str = "spread"

    @property
    def features(self) -> tuple[str, ...]:
        """The features the model reads, in the order of the observation's columns."""
        return self.trained_on[0].features

    @property
    def input_layout(self) -> ObservationLayout:
        """The layout of the model's own observation and action spaces: the one it was trained
        on, or the one enclosing all of them (:func:`~dlsched.envs.observation.
        enclosing_layout`)."""
        return enclosing_layout(self.trained_on)

    @property
    def observation_shape(self) -> tuple[int, int]:
        """The shape of what the network reads: a row per slot of :attr:`input_layout`, its
        features for each of :attr:`frame_stack` frames."""
        slots, features = self.input_layout.shape
        return (slots, features * self.frame_stack)

    @property
    def action_shape(self) -> tuple[int]:
        """The shape of the agent's action: one per slot, or one per-slot agent's own."""
        return (1,) if self.slot_agents else (self.input_layout.shape[0],)

    def spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Box]:
        """The model's observation and action spaces, as its training environment had them:
        the environment's ``Box(0, 1)`` stacked over the frames (``VecFrameStack``), and the
        agent's ``Box(-1, 1)`` (:class:`~dlsched.policies.agent_actions.AgentActions`)."""
        observation = gym.spaces.Box(0.0, 1.0, self.observation_shape, dtype=np.float32)
        action = gym.spaces.Box(AGENT_LOW, AGENT_HIGH, self.action_shape, dtype=np.float32)
        return observation, action

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": CARD_FORMAT,
                "algo": self.algo,
                "kind": self.kind.value,
                "features": list(self.features),
                "trained_on": [
                    {"workers": layout.workers, "slots_per_worker": layout.slots_per_worker}
                    for layout in self.trained_on
                ],
                "actions": self.actions.to_data(),
                "frame_stack": self.frame_stack,
                "slot_agents": self.slot_agents,
                "reward": self.reward,
                "scenarios": list(self.scenarios),
                "run_id": self.run_id,
                "dlsched_version": self.dlsched_version,
                "network": self.network,
                "sb3_objects": dict(self.sb3_objects),
                "placer": self.placer,
            },
            indent=2,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str, origin: str) -> ModelCard:
        """Parse a card; ``origin`` (its path) is named in errors.

        Raises:
            PolicyError: not a card of a known format.
        """
        try:
            data = card_data(text, "model card", origin, CARD_FORMAT)
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise _malformed(origin, error) from error
        try:
            # format 1 kept the features in its one layout, format 2 beside its one layout
            trained_on = data["layout"] if data["format"] == 1 else data["trained_on"]
            features = trained_on["features"] if data["format"] == 1 else data["features"]
            layouts = trained_on if data["format"] >= 3 else [trained_on]
            # format 4 records the network and the archive's pickled values, earlier ones not
            data_format = data["format"] >= DATA_CARD_FORMAT
            network = data["network"] if data_format else ""
            sb3_objects = data["sb3_objects"] if data_format else {}
            if data_format and (network not in MODEL_NETWORKS or not isinstance(sb3_objects, dict)):
                raise ValueError(
                    f"network {network!r} (expected one of {', '.join(MODEL_NETWORKS)}) or "
                    f"sb3_objects {sb3_objects!r} (expected an object)"
                )
            card = cls(
                algo=str(data["algo"]),
                kind=JobKind(data["kind"]),
                trained_on=tuple(
                    ObservationLayout(
                        int(layout["workers"]),
                        int(layout["slots_per_worker"]),
                        tuple(str(name) for name in features),
                    )
                    for layout in layouts
                ),
                actions=ActionMapping.from_data(data["actions"]),
                frame_stack=int(data.get("frame_stack", 1)),
                slot_agents=bool(data.get("slot_agents", False)),
                reward=str(data.get("reward", "")),
                scenarios=tuple(str(name) for name in data.get("scenarios", ())),
                run_id=data.get("run_id"),
                dlsched_version=str(data.get("dlsched_version", "")),
                network=network,
                sb3_objects=sb3_objects,
                placer=str(data.get("placer", "spread")),
            )
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, PolicyError):  # the action mapping's own check
                raise ModelError(f"model card {origin}: {error}") from error
            raise _malformed(origin, error) from error
        problems = card._problems()
        if problems:
            raise _malformed(origin, ValueError("; ".join(problems)))
        return card

    def _problems(self) -> list[str]:
        """What makes this card one no model of dlsched has."""
        problems = []
        if self.algo not in ALGORITHMS:
            problems.append(f"algo {self.algo!r} is not one of {', '.join(ALGORITHMS)}")
        if not self.trained_on:
            problems.append("the card lists no layout it was trained on")
        for layout in self.trained_on:
            if layout.workers < 1 or layout.slots_per_worker < 1:
                problems.append(
                    f"layout of {layout.workers} worker(s) x {layout.slots_per_worker} "
                    "slots: both must be >= 1"
                )
        if self.trained_on and not self.features:
            problems.append("the card lists no features")
        if self.frame_stack < 1:
            problems.append(f"frame_stack {self.frame_stack} must be >= 1")
        if self.placer not in PLACERS:
            problems.append(f"placer {self.placer!r} is not one of {', '.join(PLACERS)}")
        return problems

    def check_scenario(self, scenario: Scenario, source: str, any_layout: bool) -> None:
        """Refuse a scenario whose environment is not one the model acts on.

        Args:
            scenario: the scenario the model is asked to schedule.
            source: the model, as the message names it.
            any_layout: whether the model's network acts on any layout of its features.

        Raises:
            ModelError: the scenario's jobs are of another kind than the model's, or its
                observation layout is not one the model acts on (:meth:`check_layout`).
        """
        if scenario.kind is not self.kind:
            raise ModelError(
                f"model {source!r} schedules {self.kind.value} jobs (its {CARD_FILE} says kind: "
                f"{self.kind.value}) but scenario {scenario.name!r} has {scenario.kind.value} "
                f"jobs; evaluate it on {self.kind.value} scenarios, or train a "
                f"{scenario.kind.value} model"
            )
        layout = ObservationLayout(len(scenario.workers), scenario.slots_per_worker)
        self.check_layout(layout, f"scenario {scenario.name!r} gives", source, any_layout)

    def check_layout(
        self, layout: ObservationLayout, whose: str, source: str, any_layout: bool
    ) -> None:
        """Refuse an observation layout that lacks a feature the model reads, or, unless
        ``any_layout``, of other workers and slots than its own (:attr:`input_layout`).

        Args:
            layout: the layout the model is asked to act on.
            whose: what gives it, in the message (``the environment's is``).
            source: the model, as the message names it.
            any_layout: whether the model's network acts on any layout of its features.

        Raises:
            ModelError: naming both layouts.
        """
        trained = self.input_layout
        same_shape = (layout.workers, layout.slots_per_worker) == (
            trained.workers,
            trained.slots_per_worker,
        )
        if set(self.features) <= set(layout.features) and (any_layout or same_shape):
            return
        raise ModelError(
            f"model {source!r} was trained on observation layout "
            f"[{describe_layouts(self.trained_on)}] but {whose} [{describe_layout(layout)}]; "
            "evaluate it on a scenario with "
            f"{trained.workers} worker(s) and {trained.slots_per_worker} slots per worker, or "
            "train a model on this one"
        )


def _malformed(origin: str, error: Exception) -> ModelError:
    return ModelError(
        f"model card {origin} is malformed ({type(error).__name__}: {error}); expected the "
        f"{CARD_FILE} that `dlsched train` writes beside {MODEL_FILE}"
    )


class Normalizer(Protocol):
    """What normalises a model's observations: a loaded model's
    :class:`~dlsched.policies.normalization.ObservationNormalizer`, or in training the live
    ``VecNormalize`` of its environments."""

    def normalize_obs(self, obs: np.ndarray, /) -> np.ndarray | dict[str, np.ndarray]: ...


class LearnedPolicy(Policy):
    """A trained SB3 model as a dlsched policy.

    Args:
        model: the trained model.
        card: its model card (layout, algorithm, action bounds).
        normalizer: the observation statistics it was trained with (``None``: raw observations).
        source: where it was loaded from (a path or a ``runs:/`` URI), for tracking.
        name: its name in tables, runs and folders; by default the algorithm and the first
            characters of its training run (``ppo-df70df98``).
    """

    predicts_batches = True

    def __init__(
        self,
        model: BaseAlgorithm,
        card: ModelCard,
        normalizer: Normalizer | None = None,
        source: str = "",
        name: str | None = None,
    ) -> None:
        expected, sees = card.action_shape, card.observation_shape
        space = model.action_space
        bounds = (AGENT_LOW, AGENT_HIGH)
        if space.shape != expected or model.observation_space.shape != sees:
            raise ModelError(
                f"model acts on {space.shape} and sees {model.observation_space.shape}, but "
                f"its card's layout ({describe_layout(card.input_layout)}, {card.frame_stack} "
                f"frame(s)) needs actions of shape {expected} and observations of shape {sees}; "
                "the card does not belong to this model"
            )
        if not isinstance(space, gym.spaces.Box) or (space.low.min(), space.high.max()) != bounds:
            raise ModelError(
                f"model acts in {space}, but its card's {card.actions.mode.value} actions are "
                f"mapped from [{AGENT_LOW:g}, {AGENT_HIGH:g}] per slot; the card does not belong "
                "to this model"
            )
        self.model = model
        self.card = card
        self.normalizer = normalizer
        self.source = source
        trained = card.input_layout
        #: the layout it acts on (:meth:`use_layout`): the environment's observations
        self.layout = ObservationLayout(trained.workers, trained.slots_per_worker)
        #: the columns of that layout's observations the model reads (``None``: all of them, or
        #: features no environment observes, which :meth:`use_layout` refuses with both layouts)
        self._columns = (
            feature_columns(self.layout.features, card.features)
            if set(card.features) <= set(self.layout.features)
            else None
        )
        self._frames: StackedObservations[np.ndarray] | None = None
        self._placer = placer_named(card.placer)
        suffix = f"-{card.run_id[:8]}" if card.run_id else ""
        self._name = name or f"{card.algo}{suffix}"

    @property
    def placer(self) -> Placer:
        """The placer of arriving jobs the model was trained with."""
        return self._placer

    # A learned policy is named after its model, so that two models can be evaluated together.
    @property
    def name(self) -> str:  # type: ignore[override]  # per model, where baselines name a class
        return self._name

    def params(self) -> dict[str, ParamValue]:
        return {
            "algo": self.card.algo,
            "model": self.source,
            "training_run": self.card.run_id or "",
            "reward": self.card.reward,
            "scenarios": ",".join(self.card.scenarios),
        }

    def reset(self) -> None:
        """Forget the frames of the last episode."""
        self._frames = None

    @property
    def any_layout(self) -> bool:
        """Whether the model acts on any layout of its features (its network is the slot
        network), not only on the one it was trained on."""
        return isinstance(self.model.policy, SlotActorCriticPolicy)

    def check_scenario(self, scenario: Scenario) -> None:
        """Refuse a scenario of another job kind than the model's, or of an observation
        layout it does not act on (:meth:`ModelCard.check_scenario`)."""
        self.card.check_scenario(scenario, self.source or self.name, self.any_layout)

    def bind(self, scenario: Scenario, backend: BackendCapabilities) -> None:
        """Refuse a scenario the model cannot schedule, and act on its layout."""
        self.check_scenario(scenario)
        self.use_layout(ObservationLayout(len(scenario.workers), scenario.slots_per_worker))

    def use_layout(self, layout: ObservationLayout) -> None:
        """Act on observations of ``layout`` from now on.

        Raises:
            ModelError: naming both layouts, if the model does not act on ``layout``.
        """
        source = self.source or self.name
        self.card.check_layout(layout, "the environment's is", source, self.any_layout)
        network = self.model.policy
        if isinstance(network, SlotActorCriticPolicy):
            network.fit_layout(
                layout.workers, layout.slots_per_worker, self.card.input_layout.workers
            )
        self.layout = layout
        self._columns = feature_columns(layout.features, self.card.features)
        self._frames = None

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Limits for one observation or a batch of them (raw, as the environment gives them).

        With frame stacking, successive calls are successive steps: :meth:`reset` (called by
        :class:`~dlsched.policies.TelemetryFeed` at every environment reset) or
        ``episode_start`` marks where an episode begins, as in SB3's ``evaluate_policy``.
        """
        raw = np.asarray(observation, dtype=np.float32)
        observed = self._observed_layout(raw)
        batch = raw if raw.ndim == 3 else raw[None]
        selects = self._columns is not None and observed is self.layout
        own = batch[..., self._columns] if selects else batch
        model_input = self._stacked(own, episode_start) if self.card.frame_stack > 1 else own
        if self.normalizer is not None:
            normalized = self.normalizer.normalize_obs(model_input)
            assert isinstance(normalized, np.ndarray)
            model_input = normalized
        if self.card.slot_agents:
            views = own_rows_first(model_input).reshape(-1, *model_input.shape[1:])
            action, next_state = self.model.predict(views, state, None, deterministic)
            action = np.asarray(action).reshape(len(batch), -1)
        else:
            action, next_state = self.model.predict(
                model_input, state, episode_start, deterministic
            )
        limits = self.card.actions.to_limits(np.asarray(action), batch, observed)
        return (limits if raw.ndim == 3 else limits[0]), next_state

    def _observed_layout(self, raw: np.ndarray) -> ObservationLayout:
        """The layout of ``raw`` (one observation or a batch): the environment's, every feature
        of :attr:`layout`, or the model's own features only (what its MLflow Model takes, and
        what observations recorded before the environments observed more hold).

        Raises:
            PolicyError: neither.
        """
        own = ObservationLayout(
            self.layout.workers, self.layout.slots_per_worker, self.card.features
        )
        for layout in (self.layout, own):
            if raw.shape[-2:] == layout.shape and raw.ndim in (2, 3):
                return layout
        raise PolicyError(
            f"observation of shape {raw.shape} does not match the layout the model acts on "
            f"[{describe_layout(self.layout)}], shape {self.layout.shape} (or a batch of them)"
        )

    def _stacked(self, batch: np.ndarray, episode_start: np.ndarray | None) -> np.ndarray:
        """``batch`` with the frames before it, exactly as ``VecFrameStack`` stacks them."""
        if self._frames is None or self._frames.stacked_obs.shape[0] != len(batch):
            space = gym.spaces.Box(0.0, 1.0, batch.shape[1:], dtype=np.float32)
            self._frames = StackedObservations(len(batch), self.card.frame_stack, space, "last")
            return self._frames.reset(batch)
        starts = np.zeros(len(batch), bool) if episode_start is None else np.asarray(episode_start)
        # SB3 expects the last frame of an ended episode in its info; it is not used here
        infos = [
            {"terminal_observation": obs} if start else {}
            for obs, start in zip(batch, starts, strict=True)
        ]
        stacked, _ = self._frames.update(batch, starts.astype(bool), infos)
        return stacked


def feature_columns(observed: Sequence[str], read: Sequence[str]) -> np.ndarray | None:
    """The columns of observations of the features ``observed`` that hold the features a model
    ``read``s, in its order; ``None`` where they are all of them in that order.

    Raises:
        ModelError: a feature the model reads is not observed.
    """
    if tuple(observed) == tuple(read):
        return None
    missing = [name for name in read if name not in observed]
    if missing:
        raise ModelError(
            f"the model reads features {missing} that the observation does not have "
            f"({', '.join(observed)}); use the dlsched version the model's card names"
        )
    return np.array([list(observed).index(name) for name in read])


def save_model(
    model: BaseAlgorithm, normalizer: VecNormalize | None, card: ModelCard, folder: Path
) -> Path:
    """Write a model folder (:data:`MODEL_FILE`, :data:`NORMALIZER_FILE`, :data:`CARD_FILE`),
    every file of which loads without unpickling: the card written is ``card`` with what that
    needs read off ``model``, its network and the values SB3 pickles into ``model.zip``
    (:func:`~dlsched.policies.sb3_archive.archive_objects`).

    Returns:
        ``folder``.

    Raises:
        ModelError: the model holds something SB3 pickles that no card rebuilds (a network
            dlsched does not build, a schedule that is not a number), so it could not be
            loaded again.
    """
    network = network_of(model, card)
    folder.mkdir(parents=True, exist_ok=True)
    model.save(str(folder / MODEL_FILE))
    if normalizer is not None:
        save_normalizer(normalizer, folder / NORMALIZER_FILE)
    saved = replace(card, network=network, sb3_objects=archive_objects(model, folder / MODEL_FILE))
    (folder / CARD_FILE).write_text(saved.to_json() + "\n", encoding="utf-8")
    return folder


def load_model(path: Path, source: str = "", name: str | None = None) -> LearnedPolicy:
    """Load a model folder, or the ``model.zip`` inside one, as a :class:`LearnedPolicy`,
    unpickling nothing.

    Args:
        path: the folder :func:`save_model` wrote, its ``model.zip``, or the MLflow Model
            holding it (:mod:`dlsched.policies.mlflow_model`).
        source: how the user named it (a ``runs:/`` URI); the path by default.
        name: the policy's name (:class:`LearnedPolicy`); by default the algorithm and run.

    Raises:
        PolicyError: the model, its card or its statistics are missing or unreadable.
        ModelError: a model saved by dlsched 0.1.0 (:func:`~dlsched.policies.model_files.
            refuse_pickled_model`: the message names the command that converts it), or an
            archive holding a pickle that nothing rebuilds
            (:func:`~dlsched.policies.sb3_archive.load_archive`).
    """
    files = model_files(path)
    refuse_pickled_model(files, source or str(path))
    card = read_card(files.card)
    model = _load_sb3(card, files.model)
    width = card.observation_shape[-1]
    normalizer = load_normalizer(files.normalizer, width) if files.normalizer is not None else None
    return LearnedPolicy(model, card, normalizer, source=source or str(path), name=name)


def read_card(path: Path) -> ModelCard:
    """The model card at ``path``, of any format this dlsched reads.

    Raises:
        ModelError: unreadable or malformed (:meth:`ModelCard.from_json`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(
            f"cannot read the card {str(path)!r} ({error}); expected the {CARD_FILE} "
            "that `dlsched train` writes (copy the whole model folder again)"
        ) from None
    return ModelCard.from_json(text, str(path))


def _load_sb3(card: ModelCard, path: Path) -> BaseAlgorithm:
    """The SB3 model at ``path`` (measured already), every entry it pickled given from
    ``card`` (:func:`~dlsched.policies.sb3_archive.load_archive`).

    Raises:
        ModelError: a pickle that nothing rebuilds, or a file SB3 cannot read.
    """
    observation_space, action_space = card.spaces()
    from_card = {
        "policy_class": policy_class(card.algo, card.network, card.slot_agents),
        "observation_space": observation_space,
        "action_space": action_space,
    }
    try:
        return load_archive(algorithm_class(card.algo), path, from_card, card.sb3_objects)
    except DlschedError:
        raise
    except _ARCHIVE_LOAD_ERRORS as error:
        raise not_a_model(
            path, f"{card.algo} cannot load it ({type(error).__name__}: {error})"
        ) from error
