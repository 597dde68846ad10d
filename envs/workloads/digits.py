"""The UCI handwritten digits the workloads train on and answer: 1797 images of 8x8 pixels.

The data ships with the package as ``data/digits.npz`` (see ``data/README.md`` for provenance
and licence), exported once from scikit-learn's copy by :func:`export_digits`; neither the
workload image nor dlsched needs scikit-learn to read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DIGITS_FILE = Path(__file__).resolve().parent / "data" / "digits.npz"
#: Pixel values are counts of set pixels in 4x4 blocks of the original 32x32 bitmaps: 0..16.
MAX_PIXEL = 16


@dataclass(frozen=True)
class Digits:
    """The digits data set.

    Attributes:
        images: ``(n, 8, 8)`` uint8 pixel counts in ``[0, 16]``.
        labels: ``(n,)`` int64 digit classes in ``[0, 9]``.
    """

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def scaled_images(self) -> np.ndarray:
        """The images as float32 in ``[0, 1]``, shape ``(n, 8, 8)``."""
        return self.images.astype(np.float32) / MAX_PIXEL


def load_digits(path: Path = DIGITS_FILE) -> Digits:
    """Read the digits from the ``.npz`` file at ``path`` (default: the packaged one)."""
    with np.load(path) as archive:
        return Digits(images=archive["images"], labels=archive["labels"])


def export_digits(path: Path = DIGITS_FILE) -> Digits:
    """Write scikit-learn's copy of the digits to ``path``; needs scikit-learn (run once).

    The pixel counts are integers in ``[0, 16]`` stored as float64 by scikit-learn; they are
    stored as uint8 here, which loses nothing (``tests/test_workloads.py`` compares the two) and
    keeps the file small.
    """
    from sklearn.datasets import load_digits as sklearn_load_digits

    bunch = sklearn_load_digits()
    digits = Digits(images=bunch.images.astype(np.uint8), labels=bunch.target.astype(np.int64))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, images=digits.images, labels=digits.labels)
    return digits
