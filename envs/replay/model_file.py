"""Reading one of a profile set's model files (``contention.json``, ``throttling.json``): the
decoded JSON of a file a set may hold or go without."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlsched.envs.errors import ProfileError


def read_model_file(path: Path, model: str) -> Any | None:
    """The decoded JSON in ``path``, or ``None`` where the set has no such file.

    Args:
        path: the file, in a profile set's folder.
        model: what the file holds (``contention``), named in the message.

    Raises:
        ProfileError: the file cannot be read or is not valid JSON; the message names the file
            and the error.
    """
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ProfileError(f"cannot read {model} file {path}: {error}") from None
