"""The JSON cards beside a model's files, read with their format version checked.

A trained model's folder holds a model card (:class:`~dlsched.policies.learned.ModelCard`), and a
shipped one also a pretrained card (:class:`~dlsched.policies.pretrained.PretrainedCard`). Each
card names the version of its format in ``format``; a reader refuses a newer one than it knows.
This module imports neither torch nor Stable-Baselines3, so listing the pretrained models stays
light.
"""

from __future__ import annotations

import json
from typing import Any

from dlsched.envs.errors import ModelError


def card_data(text: str, what: str, origin: str, newest: int) -> Any:
    """The parsed JSON of a card whose format this dlsched reads.

    Args:
        text: the card's text.
        what: what the card is, for messages (``model card``).
        origin: where it was read from (its path), for messages.
        newest: the newest format version this dlsched reads.

    Raises:
        ModelError: the card's format is newer than ``newest``.
        KeyError, TypeError, ValueError: the text is not JSON, or not an object with a
            whole-number ``format``; the caller says what it should have been.
    """
    data = json.loads(text)
    version = int(data["format"])
    if version > newest:
        raise ModelError(
            f"{what} {origin} has format {version}, newer than this dlsched reads ({newest}); "
            "upgrade dlsched"
        )
    return data
