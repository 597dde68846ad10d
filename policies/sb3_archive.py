"""A Stable-Baselines3 ``model.zip`` loaded without unpickling anything in it.

SB3's ``save`` writes a model's attributes into the archive's ``data`` member as JSON; an
attribute JSON cannot hold (a class, a space, a schedule, an array) it writes as a cloudpickle,
in base64, under the key ``:serialized:``. Its ``load`` unpickles each such entry
(``save_util.json_to_data``, top-level entries only) unless ``custom_objects`` gives the value
instead, and reads the weights (``*.pth``) with ``torch.load(..., weights_only=True)``, which
reads tensors and plain containers only. A pickle names functions to call as it is read, so an
archive runs whatever code its author put in any pickled entry (a ``clip_range`` entry whose
pickle starts a shell runs it, and the model still loads and acts normally).

So the ``data`` JSON is read here first, and every entry SB3 would unpickle is given to it as a
value from data instead, never from the pickle:

- the network's class and the observation and action spaces, from the model card (the layout,
  the frames, the network it names: :func:`~dlsched.policies.learned.load_model` passes them
  as ``from_card``); an archive's own copies of these are replaced even when they are plain
  JSON, as is ``env`` (SB3 would ``gym.make`` a name found there);
- the values of :data:`CODECS` (``policy_kwargs``, PPO's ``clip_range`` and ``clip_range_vf``,
  SAC's and TD3's ``train_freq``), which the card records as JSON (:func:`archive_objects`
  writes them as a model is saved);
- what SB3 rebuilds itself as it sets a model up (:data:`REBUILT_BY_SB3`: the learning-rate
  schedule from ``learning_rate``, the rollout or replay buffer's class, its default) and the
  state of an interrupted rollout (:data:`ROLLOUT_STATE`), given as ``None``: the state of a
  model that has not started learning, which starts a new rollout if it learns again.

An archive holding any other pickled entry is refused before SB3 reads it.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm

from dlsched.envs.errors import ModelError

#: The key under which SB3 writes a pickled entry of the ``data`` JSON.
PICKLED = ":serialized:"
#: The archive's member that holds the model's attributes.
DATA_MEMBER = "data"

#: Entries of ``data`` whose value the card determines, replaced whether pickled or not.
FROM_CARD: tuple[str, ...] = ("policy_class", "observation_space", "action_space")
#: An entry SB3's ``save`` never writes (``env`` is excluded) but its ``load`` reads: a name
#: there would be made with ``gym.make``. Replaced by ``None``, wherever it appears.
NO_ENVIRONMENT = "env"
#: Pickled entries SB3 rebuilds as it sets a model up (``_setup_model``), given as ``None``:
#: the learning-rate schedule (from the plain ``learning_rate``), the buffer classes (SB3's
#: default for a Box observation, the one dlsched trains with).
REBUILT_BY_SB3: tuple[str, ...] = ("lr_schedule", "rollout_buffer_class", "replay_buffer_class")
#: The state of the rollout a saved model was in (its last observations, its recent episodes);
#: ``None`` is the state of a model that has not started learning.
ROLLOUT_STATE: tuple[str, ...] = (
    "_last_obs",
    "_last_original_obs",
    "_last_episode_starts",
    "ep_info_buffer",
    "ep_success_buffer",
)

#: Activation functions a model's ``policy_kwargs`` may name (``activation_fn``).
ACTIVATIONS: Mapping[str, type[torch.nn.Module]] = {
    cls.__name__: cls
    for cls in (
        torch.nn.Tanh,
        torch.nn.ReLU,
        torch.nn.ELU,
        torch.nn.LeakyReLU,
        torch.nn.GELU,
        torch.nn.SiLU,
        torch.nn.Sigmoid,
    )
}
#: Optimisers a model's ``policy_kwargs`` may name (``optimizer_class``; A2C names RMSprop).
OPTIMIZERS: Mapping[str, type[torch.optim.Optimizer]] = {
    cls.__name__: cls
    for cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.SGD)
}
#: The policy keywords whose value is a class, with the classes each may name.
CLASS_KEYWORDS: Mapping[str, Mapping[str, type]] = {
    "activation_fn": ACTIVATIONS,
    "optimizer_class": OPTIMIZERS,
}


@dataclass(frozen=True)
class Codec:
    """How one attribute SB3 pickles is written into the card as JSON and read back.

    Attributes:
        encode: the JSON value of the model's attribute (``ModelError`` if it has none).
        decode: the value SB3 is given for the card's JSON value (``ModelError`` if invalid).
    """

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _constant(schedule: Any) -> float:
    """The value of a schedule that holds one value over training (as every ``--hp`` number
    does): SB3 makes one of a float it is given (``_setup_model``), so the float is enough."""
    values = {float(schedule(progress)) for progress in (1.0, 0.5, 0.0)}
    if len(values) != 1:
        raise ModelError(
            f"the schedule {schedule!r} changes over training ({sorted(values)}); a model "
            "dlsched saves records a constant, as --hp gives one"
        )
    return values.pop()


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelError(f"expected a number, got {value!r}")
    return float(value)


def _train_freq_to_data(train_freq: Any) -> list[Any]:
    frequency, unit = train_freq  # SB3's TrainFreq(frequency, TrainFrequencyUnit)
    return [int(frequency), str(unit.value)]


def _train_freq_from_data(value: Any) -> tuple[int, str]:
    """``(frequency, unit)``, which SB3 turns into its ``TrainFreq`` as it sets the model up."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], int)
        or value[1] not in ("step", "episode")
    ):
        raise ModelError(f"expected [frequency, 'step' or 'episode'], got {value!r}")
    return (value[0], value[1])


def _policy_kwargs_to_data(kwargs: Any) -> dict[str, Any]:
    """The policy's keywords as JSON: a class by its name (:data:`CLASS_KEYWORDS`), every other
    value as it is, which must be JSON already."""
    data: dict[str, Any] = {}
    for key, value in dict(kwargs).items():
        if key in CLASS_KEYWORDS and isinstance(value, type):
            if CLASS_KEYWORDS[key].get(value.__name__) is not value:
                raise ModelError(
                    f"policy keyword {key}={value.__module__}.{value.__qualname__} is none of "
                    f"the classes a model may name: {', '.join(CLASS_KEYWORDS[key])}"
                )
            data[key] = value.__name__
            continue
        try:
            data[key] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise ModelError(
                f"policy keyword {key}={value!r} is not plain data ({error})"
            ) from None
    return data


def _policy_kwargs_from_data(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ModelError(f"expected an object of policy keywords, got {data!r}")
    kwargs = dict(data)
    for key, classes in CLASS_KEYWORDS.items():
        if key in kwargs:
            name = kwargs[key]
            if not isinstance(name, str) or name not in classes:
                raise ModelError(
                    f"policy keyword {key}={name!r} names none of {', '.join(classes)}"
                )
            kwargs[key] = classes[name]
    return kwargs


#: The attributes SB3 pickles that the card records as JSON, by their key in ``data``.
CODECS: Mapping[str, Codec] = {
    "policy_kwargs": Codec(_policy_kwargs_to_data, _policy_kwargs_from_data),
    "clip_range": Codec(_constant, _number),
    "clip_range_vf": Codec(_constant, _number),
    "train_freq": Codec(_train_freq_to_data, _train_freq_from_data),
}


def _is_pickled(value: Any) -> bool:
    """Whether SB3's ``json_to_data`` would unpickle this top-level value of ``data``."""
    return isinstance(value, dict) and PICKLED in value


def data_entries(path: Path) -> dict[str, Any]:
    """The ``data`` JSON of the archive at ``path`` (read as text: nothing is unpickled); its
    size was measured by :func:`~dlsched.policies.model_files.model_files`.

    Raises:
        ModelError: no ``data`` member, or not a JSON object.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            entries = json.loads(archive.read(DATA_MEMBER).decode("utf-8"))
    except (KeyError, OSError, UnicodeDecodeError, ValueError, zipfile.BadZipFile) as error:
        raise ModelError(
            f"{str(path)!r}: cannot read its {DATA_MEMBER!r} member as JSON ({error}); expected "
            "the model.zip that `dlsched train` writes"
        ) from None
    if not isinstance(entries, dict):
        raise ModelError(
            f"{str(path)!r}: its {DATA_MEMBER!r} member is a JSON {type(entries).__name__}, not "
            "an object; expected the model.zip that `dlsched train` writes"
        )
    return entries


def pickled_entries(path: Path) -> list[str]:
    """The keys of the archive's ``data`` entries that SB3 would unpickle, in file order."""
    return [key for key, value in data_entries(path).items() if _is_pickled(value)]


def _rebuilt_without_the_card(key: str) -> bool:
    return key in FROM_CARD or key in REBUILT_BY_SB3 or key in ROLLOUT_STATE


def archive_objects(model: BaseAlgorithm, path: Path) -> dict[str, Any]:
    """What the card must record for ``model``, saved at ``path``, to be loaded without
    unpickling: the JSON value of each of its pickled entries that :data:`CODECS` covers.

    Raises:
        ModelError: SB3 pickled an attribute of the model that no card rebuilds (a learning
            rate or a clip range that is not a number, a class the policy keywords may not
            name, ...), so it could not be loaded again.
    """
    objects = {}
    for key in pickled_entries(path):
        if _rebuilt_without_the_card(key):
            continue
        if key not in CODECS:
            raise ModelError(
                f"SB3 saved the model's {key!r} as a pickle, which dlsched never loads and "
                f"cannot rebuild from the model card; {_what_can_be_pickled()}"
            )
        try:
            objects[key] = CODECS[key].encode(getattr(model, key))
        except ModelError as error:
            raise ModelError(f"the model's {key!r} cannot be saved as data: {error}") from None
    return objects


def load_archive(
    algorithm: type[BaseAlgorithm],
    path: Path,
    from_card: Mapping[str, Any],
    objects: Mapping[str, Any],
) -> BaseAlgorithm:
    """Load the SB3 model at ``path`` with every entry it pickled given as data.

    Args:
        algorithm: the SB3 class the card names.
        path: the ``model.zip``, measured already.
        from_card: the value of each of :data:`FROM_CARD`, built from the card.
        objects: the card's JSON values of the entries of :data:`CODECS`
            (:func:`archive_objects`).

    Raises:
        ModelError: a pickled entry that nothing here rebuilds, or one the card holds no valid
            value for; refused before SB3 reads the archive.
    """
    entries = data_entries(path)
    pickled = [key for key, value in entries.items() if _is_pickled(value)]
    unknown = [key for key in pickled if not _rebuilt_without_the_card(key) and key not in CODECS]
    if unknown:
        raise ModelError(
            f"{str(path)!r} holds pickled {', '.join(map(repr, unknown))}, which dlsched never "
            f"unpickles (a pickle runs code as it is read) and cannot rebuild from the model "
            f"card; {_what_can_be_pickled()}. Load it only if you trust it, with SB3's own "
            f"{algorithm.__name__}.load"
        )
    _check_shapes(path, entries, from_card)
    custom: dict[str, Any] = dict.fromkeys((*REBUILT_BY_SB3, *ROLLOUT_STATE, NO_ENVIRONMENT))
    custom.update(from_card)
    for key in (key for key in pickled if key in CODECS):
        if key not in objects:
            raise ModelError(
                f"{str(path)!r} pickled its {key!r}, and the model card records no value for "
                "it; the card does not belong to this model (copy the whole model folder again)"
            )
        try:
            custom[key] = CODECS[key].decode(objects[key])
        except ModelError as error:
            raise ModelError(f"the model card's {key!r}: {error}") from None
    # SB3 replaces an entry by its custom object before it would unpickle it (json_to_data)
    loaded: Any = algorithm.load(str(path), device="cpu", custom_objects=custom)
    assert isinstance(loaded, BaseAlgorithm)
    return loaded


def _check_shapes(path: Path, entries: Mapping[str, Any], from_card: Mapping[str, Any]) -> None:
    """Refuse a card whose spaces are not the shapes the archive was saved with: beside a
    pickled space SB3 writes its attributes as text, its ``_shape`` among them (read, never
    unpickled), so a card of another layout is named as such rather than as the weights'
    size mismatch it would become."""
    saved, described = [], []
    for key in ("observation_space", "action_space"):
        entry = entries.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("_shape"), list):
            saved.append(tuple(entry["_shape"]))
            described.append(tuple(from_card[key].shape))
    if saved != described:
        raise ModelError(
            f"{str(path)!r} was saved with observations and actions of shapes "
            f"{', '.join(map(str, saved))}, but its model card describes "
            f"{', '.join(map(str, described))}; the card does not belong to this model (copy "
            "the whole model folder again)"
        )


def _what_can_be_pickled() -> str:
    rebuilt = (*FROM_CARD, *REBUILT_BY_SB3, *ROLLOUT_STATE, *CODECS)
    return f"a model dlsched saves pickles only {', '.join(rebuilt)}"
