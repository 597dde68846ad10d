"""Converting a model saved by dlsched 0.1.0 into a folder that loads without unpickling.

A model folder of dlsched 0.1.0 keeps its normalisation statistics as SB3's ``VecNormalize``
pickle (``vec_normalize.pkl``) and a card (format 3 or earlier) that does not record the values
SB3 pickled into ``model.zip``; dlsched no longer loads it
(:func:`~dlsched.policies.model_files.refuse_pickled_model`). Converting it unpickles both
files once, the way dlsched 0.1.0 loaded them, which runs any code they name: so it runs only
when the caller says the model is trusted (``trust_pickle``; ``dlsched models convert
--trust-pickle``), and it says what it unpickled.

The converted folder keeps ``model.zip`` byte for byte (its weights unchanged) and holds the
statistics as JSON and a card of the current format, which records the network and the values
of the archive's pickled entries (:func:`~dlsched.policies.learned.save_model` writes the same).
Before anything is written in place, the converted model is loaded the safe way and must act
exactly as the unpickled one on :data:`PROBES` observations (bit for bit), and its spaces must
be those its card describes; otherwise nothing is changed.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecNormalize

from dlsched.envs.errors import ModelError, PolicyError
from dlsched.policies.learned import (
    SB3_LOAD_ERRORS,
    LearnedPolicy,
    algorithm_class,
    load_model,
    network_of,
    read_card,
)
from dlsched.policies.model_files import (
    CARD_FILE,
    DATA_CARD_FORMAT,
    MODEL_FILE,
    NORMALIZER_FILE,
    PICKLED_NORMALIZER_FILE,
    model_files,
)
from dlsched.policies.normalization import ObservationNormalizer
from dlsched.policies.sb3_archive import archive_objects, pickled_entries

#: Random observations (each a first step, as a batch) and steps of one episode (frames
#: stacked) on which the converted model must act exactly as the unpickled one.
PROBES = 64
#: The seed of the probe observations.
PROBE_SEED = 0


@dataclass(frozen=True)
class Conversion:
    """What converting a model did.

    Attributes:
        source: the model folder converted.
        destination: the folder that holds the converted model (``source`` in place).
        card_format: the format of the card it had.
        unpickled: what was unpickled to convert it: the pickled entries of ``model.zip``
            and the statistics file; empty when the model was saved as data already and
            nothing was done.
        probes: the random observations on which the converted model acted exactly as the
            original, as one batch and as the steps of an episode (0: nothing was converted).
    """

    source: Path
    destination: Path
    card_format: int
    unpickled: tuple[str, ...]
    probes: int

    @property
    def converted(self) -> bool:
        """Whether anything was converted (a model saved as data already is left alone)."""
        return bool(self.unpickled)


def convert_model(path: Path, output: Path | None, trust_pickle: bool) -> Conversion:
    """Convert the model at ``path`` (a folder, its ``model.zip``, or the MLflow Model holding
    it) into a folder that loads without unpickling.

    Args:
        path: the model saved by dlsched 0.1.0.
        output: the folder to write the converted model to, which must not exist; ``None``:
            convert in place (the statistics pickle is removed, ``model.zip`` kept as it is).
        trust_pickle: the caller trusts the model's origin: converting unpickles its files,
            which runs any code they name.

    Raises:
        PolicyError: ``trust_pickle`` is not given, or ``output`` exists.
        ModelError: the files are no model dlsched 0.1.0 wrote, or the converted model does
            not act exactly as the original (nothing is written then).
    """
    refuse_untrusted(str(path), trust_pickle)
    if output is not None and output.exists():
        raise PolicyError(
            f"--output {str(output)!r} exists; give a folder that does not exist yet (or omit "
            "--output to convert the model in place)"
        )
    files = model_files(path)
    card = read_card(files.card)  # refuses a card that is not JSON with a format
    card_format = int(json.loads(files.card.read_text(encoding="utf-8"))["format"])
    folder = files.model.parent
    if card_format >= DATA_CARD_FORMAT:  # saved as data already: nothing to unpickle
        return Conversion(folder, folder, card_format, (), 0)
    unpickled = [f"{MODEL_FILE}:{key}" for key in pickled_entries(files.model)]
    model = _unpickled_model(card.algo, files.model)
    vec_normalize = None
    if files.pickled_normalizer is not None:
        vec_normalize = _unpickled_normalizer(files.pickled_normalizer)
        unpickled.append(PICKLED_NORMALIZER_FILE)
    # the model as dlsched 0.1.0 loaded it: SB3's normaliser, its spaces and classes unpickled
    original = LearnedPolicy(model, card, vec_normalize, source=str(path))
    _check_spaces(original, path)
    converted = replace(
        card, network=network_of(model, card), sb3_objects=archive_objects(model, files.model)
    )
    parent = (output or folder).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dlsched-convert-", dir=parent) as scratch:
        staged = Path(scratch) / "model"
        staged.mkdir()
        shutil.copyfile(files.model, staged / MODEL_FILE)
        if vec_normalize is not None:
            statistics = ObservationNormalizer.of(vec_normalize).to_json()
            (staged / NORMALIZER_FILE).write_text(statistics + "\n", encoding="utf-8")
        (staged / CARD_FILE).write_text(converted.to_json() + "\n", encoding="utf-8")
        _check_same_actions(original, load_model(staged), path)
        if output is not None:
            os.replace(staged, output)
        else:
            _replace_in_place(staged, folder)
    return Conversion(folder, output or folder, card_format, tuple(unpickled), PROBES)


def refuse_untrusted(model: str, trust_pickle: bool) -> None:
    """Refuse to convert ``model`` unless the caller trusts it (``trust_pickle``).

    Raises:
        PolicyError: ``trust_pickle`` is false.
    """
    if not trust_pickle:
        raise PolicyError(
            f"converting {model!r} unpickles its {PICKLED_NORMALIZER_FILE} and the pickled "
            f"entries of its {MODEL_FILE}, which runs any code they name; convert only a model "
            "whose origin you trust, and say so with --trust-pickle (trust_pickle=True)"
        )


#: What SB3's load raises on a file it cannot read, unpickling every entry: its load errors, and
#: an entry naming a module that is not installed.
_UNPICKLING_LOAD_ERRORS: tuple[type[Exception], ...] = (*SB3_LOAD_ERRORS, ImportError)


def _unpickled_model(algo: str, path: Path) -> Any:
    """The SB3 model at ``path``, loaded as SB3 loads it: every pickled entry unpickled."""
    cls = algorithm_class(algo)
    try:
        return cls.load(str(path), device="cpu")
    except _UNPICKLING_LOAD_ERRORS as error:
        raise ModelError(
            f"{str(path)!r}: {cls.__name__}.load cannot read it ({type(error).__name__}: "
            f"{error}); expected a {MODEL_FILE} that dlsched 0.1.0 wrote"
        ) from error


def _unpickled_normalizer(path: Path) -> VecNormalize:
    """The ``VecNormalize`` pickled at ``path``, unpickled."""
    try:
        with path.open("rb") as stream:
            normalizer = pickle.load(stream)
    except (OSError, EOFError, AttributeError, ImportError, pickle.UnpicklingError) as error:
        raise ModelError(
            f"cannot unpickle {str(path)!r} ({type(error).__name__}: {error}); expected the "
            "VecNormalize pickle that dlsched 0.1.0 wrote"
        ) from error
    if not isinstance(normalizer, VecNormalize):
        raise ModelError(
            f"{str(path)!r} holds a {type(normalizer).__name__}, not a VecNormalize; expected "
            "the normalisation statistics that dlsched 0.1.0 wrote"
        )
    return normalizer


def _check_spaces(original: LearnedPolicy, path: Path) -> None:
    """Refuse a model whose pickled spaces are not those its card describes, which the
    converted model is given in their place."""
    observation, action = original.card.spaces()
    pickled = (original.model.observation_space, original.model.action_space)
    if pickled != (observation, action):
        raise ModelError(
            f"{str(path)!r}: its pickled spaces {pickled} are not those its card describes "
            f"({observation}, {action}), which the converted model would be given; not "
            "converted"
        )


def _check_same_actions(original: LearnedPolicy, converted: LearnedPolicy, path: Path) -> None:
    """Refuse a conversion whose model acts otherwise than the unpickled one: on a batch of
    random observations (each a first step) and on one episode of as many steps (its frames
    stacked), the limits must be equal bit for bit."""
    rng = np.random.default_rng(PROBE_SEED)
    observations = rng.random((PROBES, *original.layout.shape), dtype=np.float32)
    pairs = []
    for policy in (original, converted):
        policy.reset()
        batch, _ = policy.predict(observations)
        policy.reset()
        steps = np.stack([policy.predict(observation)[0] for observation in observations])
        pairs.append((batch, steps))
    for got, want in zip(pairs[1], pairs[0], strict=True):
        if not np.array_equal(got, want):
            gap = float(np.max(np.abs(got - want)))
            raise ModelError(
                f"{str(path)!r}: the converted model's limits differ from the original's by up to "
                f"{gap:.3g} on the probe observations; not converted (report it as a bug)"
            )


def _replace_in_place(staged: Path, folder: Path) -> None:
    """Move the converted files into ``folder``: the statistics, then the card (a folder
    stopped in between still holds the old card, so it is converted again), then remove the
    pickle. ``model.zip`` is left as it is (the staged copy is the same bytes)."""
    if (staged / NORMALIZER_FILE).exists():
        os.replace(staged / NORMALIZER_FILE, folder / NORMALIZER_FILE)
    os.replace(staged / CARD_FILE, folder / CARD_FILE)
    (folder / PICKLED_NORMALIZER_FILE).unlink(missing_ok=True)
