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

The normaliser is SB3's own ``VecNormalize`` with :class:`SlotPooledStatistics` in place of its
``obs_rms``, so it saves, loads and synchronises (``sync_envs_normalization``) as usual.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from dlsched.envs.errors import PolicyError

#: Normalised observations are clipped to this absolute value (SB3's default).
CLIP_OBSERVATION = 10.0


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


def save_normalizer(normalizer: VecNormalize, path: Path) -> None:
    """Write the statistics and settings of ``normalizer`` (SB3's pickle format)."""
    normalizer.save(str(path))


def load_normalizer(path: Path) -> VecNormalize:
    """Read a saved normaliser for inference: frozen statistics, rewards untouched.

    The object has no environment attached; only :meth:`VecNormalize.normalize_obs` is used.

    Raises:
        PolicyError: the file is missing or holds no ``VecNormalize``.
    """
    try:
        with path.open("rb") as stream:
            normalizer = pickle.load(stream)
    except FileNotFoundError:
        raise PolicyError(
            f"normalisation statistics {str(path)!r} are missing; a model trained by "
            "`dlsched train` keeps them beside model.zip, copy the whole model folder"
        ) from None
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        raise PolicyError(
            f"cannot read normalisation statistics {str(path)!r}: {error}; expected the "
            "VecNormalize pickle `dlsched train` writes"
        ) from error
    if not isinstance(normalizer, VecNormalize):
        raise PolicyError(
            f"{str(path)!r} holds a {type(normalizer).__name__}, not a VecNormalize; expected "
            "the normalisation statistics `dlsched train` writes"
        )
    normalizer.training = False
    normalizer.norm_reward = False
    return normalizer
