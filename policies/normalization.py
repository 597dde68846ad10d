"""Observation normalisation for learned policies: one running mean and variance per feature.

Stable-Baselines3's :class:`~stable_baselines3.common.vec_env.VecNormalize` keeps statistics per
array element, that is per slot and feature. Slots fill from the first one, so the first slot is
nearly always active and the last nearly never: per-slot statistics would scale the same job's
row differently in different slots, and a network that shares its weights across slots (see
:mod:`dlsched.policies.slot_network`) would see two different inputs for one situation. Pooling
the statistics of each feature over every slot keeps a row's meaning independent of its slot.

The rows an observation padded to a larger layout than its environment's lacks are NaN
(:mod:`dlsched.envs.observation`): they enter no statistic, which are then those of the
environments' own rows, and stay NaN when normalised, for the network to tell them apart.

In training, the normaliser is SB3's own ``VecNormalize`` with :class:`SlotPooledStatistics` in
place of its ``obs_rms``, so it updates and synchronises (``sync_envs_normalization``) as usual.
A saved model keeps only what acting needs, the statistics and the settings, as JSON
(:data:`NORMALIZER_FORMAT`), and loads them as an :class:`ObservationNormalizer`: SB3 would save
and load the whole ``VecNormalize`` with :mod:`pickle`, which runs whatever code the file names,
and a model folder is a file users hand each other (``docs/security.md``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from dlsched.envs.errors import ModelError, PolicyError
from dlsched.policies.cards import card_data

#: Normalised observations are clipped to this absolute value (SB3's default).
CLIP_OBSERVATION = 10.0
#: Version of the statistics file's format; a reader refuses a newer one.
NORMALIZER_FORMAT = 1


class SlotPooledStatistics(RunningMeanStd):
    """Running mean and variance of each feature (last axis), pooled over all other axes.

    Args:
        features: the number of features (the observation's last dimension).
        epsilon: the initial pseudo-count (SB3's default).
    """

    def __init__(self, features: int, epsilon: float = 1e-4) -> None:
        super().__init__(epsilon=epsilon, shape=(features,))

    def update(self, arr: np.ndarray) -> None:
        """Add a batch of observations of any leading shape ``(..., features)``, but for their
        absent rows (NaN)."""
        rows = np.asarray(arr, dtype=np.float64).reshape(-1, self.mean.shape[-1])
        super().update(rows[~np.isnan(rows).any(axis=1)])

    def copy(self) -> SlotPooledStatistics:
        twin = SlotPooledStatistics(features=self.mean.shape[-1])
        twin.mean = self.mean.copy()
        twin.var = self.var.copy()
        twin.count = float(self.count)
        return twin


class FrozenStatistics(SlotPooledStatistics):
    """Per-feature statistics that no batch updates: those of a trained model, whose actor reads
    every input through them (:mod:`dlsched.runs.training.warm_start`). Updated by the
    observations of a fine-tuning, they would move every input the actor sees, and its actions
    with them, before any weight had changed.

    Args:
        statistics: the model's statistics (copied).
    """

    def __init__(self, statistics: ObservationNormalizer) -> None:
        super().__init__(features=statistics.mean.shape[-1])
        self.mean = statistics.mean.copy()
        self.var = statistics.var.copy()
        self.count = statistics.count

    def update(self, arr: np.ndarray) -> None:
        """Leave the statistics as they are."""

    def copy(self) -> FrozenStatistics:
        twin = FrozenStatistics.__new__(FrozenStatistics)
        RunningMeanStd.__init__(twin, shape=self.mean.shape)
        twin.mean, twin.var, twin.count = self.mean.copy(), self.var.copy(), float(self.count)
        return twin


def hold_statistics(
    normalizer: VecNormalize, statistics: ObservationNormalizer | None = None
) -> None:
    """Freeze the observation statistics of a training normaliser (:func:`slot_normalizer`'s)
    at ``statistics``, by default at its own now: an actor has been fitted to them (imitated, or
    started from a model), and the rest of the training must not move its inputs. Its reward
    scaling goes on learning.

    Raises:
        PolicyError: not a normaliser of per-feature observation statistics.
    """
    held = statistics if statistics is not None else ObservationNormalizer.of(normalizer)
    # SB3 annotates obs_rms with its dict variant too; a Box space has the plain one
    normalizer.obs_rms = FrozenStatistics(held)  # type: ignore[assignment]


def slot_normalizer(venv: VecEnv, gamma: float, normalize_reward: bool) -> VecNormalize:
    """Wrap ``venv`` in a ``VecNormalize`` whose observation statistics are per feature.

    Args:
        venv: the vector environment (observations ``(slots, features)``).
        gamma: the discount the reward normalisation assumes (the algorithm's).
        normalize_reward: also scale rewards by the running standard deviation of returns.
    """
    normalizer = VecNormalize(
        venv,
        norm_obs=True,
        norm_reward=normalize_reward,
        gamma=gamma,
        clip_obs=CLIP_OBSERVATION,
    )
    shape = venv.observation_space.shape
    assert shape is not None
    # SB3 annotates obs_rms with its dict variant too; a Box space has the plain one
    normalizer.obs_rms = SlotPooledStatistics(features=shape[-1])  # type: ignore[assignment]
    return normalizer


@dataclass(frozen=True, eq=False)
class ObservationNormalizer:
    """The observation statistics a model was trained with, frozen: what acting needs of SB3's
    ``VecNormalize``, and nothing that could run code when it is read.

    Attributes:
        mean: the mean of each feature of the model's input (float64, ``(features,)``; with
            frame stacking, of each feature of each frame).
        var: the variance of each.
        count: how many observations' rows the statistics pooled (SB3's pseudo-count included).
        epsilon: added to the variance before its square root (``VecNormalize.epsilon``).
        clip: normalised values are clipped to ``[-clip, clip]`` (``VecNormalize.clip_obs``).
    """

    mean: np.ndarray
    var: np.ndarray
    count: float
    epsilon: float
    clip: float

    def normalize_obs(self, observation: np.ndarray) -> np.ndarray:
        """``observation`` normalised, exactly as ``VecNormalize.normalize_obs`` computes it
        (the same operations in the same order), so a loaded model acts bit for bit as it did
        in training."""
        scaled = (observation - self.mean) / np.sqrt(self.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    @classmethod
    def of(cls, normalizer: VecNormalize) -> ObservationNormalizer:
        """The frozen statistics of a training normaliser (:func:`slot_normalizer`'s).

        Raises:
            PolicyError: it does not normalise observations with one statistic per feature.
        """
        statistics = normalizer.obs_rms
        if not normalizer.norm_obs or not isinstance(statistics, RunningMeanStd):
            raise PolicyError(
                f"a VecNormalize with norm_obs={normalizer.norm_obs} and statistics "
                f"{type(statistics).__name__} cannot be saved with a model; expected the "
                "normaliser of slot_normalizer (observation statistics per feature)"
            )
        if statistics.mean.ndim != 1:
            raise PolicyError(
                f"observation statistics of shape {statistics.mean.shape} cannot be saved with a "
                "model; expected one per feature (slot_normalizer's SlotPooledStatistics)"
            )
        return cls(
            mean=np.array(statistics.mean, dtype=np.float64),
            var=np.array(statistics.var, dtype=np.float64),
            count=float(statistics.count),
            epsilon=float(normalizer.epsilon),
            clip=float(normalizer.clip_obs),
        )

    def to_json(self) -> str:
        """The statistics as JSON; every float is written in full (Python's shortest repr that
        reads back to the same double), so they load bit for bit."""
        return json.dumps(
            {
                "format": NORMALIZER_FORMAT,
                "mean": self.mean.tolist(),
                "var": self.var.tolist(),
                "count": self.count,
                "epsilon": self.epsilon,
                "clip": self.clip,
            },
            indent=2,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str, origin: str, features: int) -> ObservationNormalizer:
        """Parse statistics; ``origin`` (their path) is named in errors.

        Args:
            text: the file's text.
            origin: where it was read from, for messages.
            features: the width of the model's input (its features times its frames), which
                the statistics must have.

        Raises:
            ModelError: not statistics of this format, of another width than ``features``, or
                with a value no statistics have (a negative variance, an infinity, ...).
        """
        try:
            data = card_data(text, "normalisation statistics", origin, NORMALIZER_FORMAT)
            mean, var = _finite_floats(data["mean"]), _finite_floats(data["var"])
            count, epsilon, clip = (
                _finite_floats([data[key]])[0] for key in ("count", "epsilon", "clip")
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ModelError(
                f"normalisation statistics {origin} are malformed ({type(error).__name__}: "
                f"{error}); expected the {Path(origin).name} that `dlsched train` writes "
                "(copy the whole model folder again)"
            ) from error
        problems = []
        if len(mean) != features or len(var) != features:
            problems.append(
                f"{len(mean)} means and {len(var)} variances for a model whose input has "
                f"{features} features"
            )
        if min(var, default=0.0) < 0 or count <= 0 or epsilon <= 0 or clip <= 0:
            problems.append(
                f"a variance, the count ({count}), epsilon ({epsilon}) or clip ({clip}) is "
                "negative or zero"
            )
        if problems:
            raise ModelError(
                f"normalisation statistics {origin}: {'; '.join(problems)}; they do not belong "
                "to this model (copy the whole model folder that `dlsched train` wrote)"
            )
        return cls(np.array(mean), np.array(var), count, epsilon, clip)


def _finite_floats(values: Any) -> list[float]:
    """``values`` (a JSON list) as floats, each finite (``ValueError`` otherwise)."""
    if not isinstance(values, list):
        raise TypeError(f"expected a list of numbers, got {type(values).__name__}")
    floats = [float(value) for value in values]
    if not all(math.isfinite(value) for value in floats):
        raise ValueError("a value is not a finite number")
    return floats


def save_normalizer(normalizer: VecNormalize, path: Path) -> None:
    """Write the statistics and settings of ``normalizer`` as JSON (:class:`ObservationNormalizer`).

    Raises:
        PolicyError: it is not a normaliser a model can be saved with
            (:meth:`ObservationNormalizer.of`).
    """
    path.write_text(ObservationNormalizer.of(normalizer).to_json() + "\n", encoding="utf-8")


def load_normalizer(path: Path, features: int) -> ObservationNormalizer:
    """Read a model's normalisation statistics (JSON: nothing in them is code).

    Args:
        path: the statistics file beside the model.
        features: the width of the model's input (its features times its frames).

    Raises:
        ModelError: the file is unreadable, malformed, or of another width than ``features``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(
            f"cannot read normalisation statistics {str(path)!r} ({error}); expected the "
            f"{path.name} that `dlsched train` writes (copy the whole model folder again)"
        ) from None
    return ObservationNormalizer.from_json(text, str(path), features)
