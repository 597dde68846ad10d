"""The extras of dlsched: which optional part needs which packages, and the check at its door.

``pip install dlsched`` is the library: the environments on replay, the scenarios, the
baselines and the policy interface, on numpy, Gymnasium, pydantic and PyYAML. The other parts
come with extras (``[project.optional-dependencies]`` of ``pyproject.toml``):

========  ==========================================================================
docker    the Docker backend (``backend="docker"``)
render    ``render_mode="rgb_array"`` frames (Matplotlib)
train     trained models: loading one (``pretrained:``, a ``.zip``), training (SB3, torch)
track     MLflow tracking, its store and plots
lab       the command line ``dlsched`` and :mod:`dlsched.runs`: all of the above, SciPy, tqdm
ray       training on Ray RLlib (``--engine rllib``)
all       lab and ray
========  ==========================================================================

A part that needs an extra calls :func:`require_extra` where a user enters it (a Docker backend
is built, a trained model loaded, a model read from MLflow, a command of the CLI run, a name of
:mod:`dlsched.runs` imported), before it imports the extra's packages: used without them, it
says in one line which extra to install, rather than failing on a ``ModuleNotFoundError`` from
deep inside. Nothing in the core imports an extra's package otherwise (an import-linter
contract in ``pyproject.toml`` and ``tests/envs/test_extras.py`` hold it to that).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from dlsched.envs.errors import MissingExtraError

_DOCKER = ("docker", "packaging", "psutil")  # psutil: the owner of a container (envs.owner)
_TRAIN = ("stable_baselines3", "torch")
# psutil: the owner of a run; filelock: one process of many creates a new local store
_TRACK = ("mlflow", "sqlalchemy", "matplotlib", "filelock", "psutil")

#: Each extra and the packages it installs that dlsched imports, by import name (which differs
#: from the distribution's for some: ``stable_baselines3``, ``tree`` of ``dm-tree``).
EXTRAS: dict[str, tuple[str, ...]] = {
    "docker": _DOCKER,
    "render": ("matplotlib",),
    "train": _TRAIN,
    "track": _TRACK,
    "lab": tuple(dict.fromkeys((*_DOCKER, *_TRAIN, *_TRACK, "scipy", "tqdm"))),
    "ray": ("ray", "tree", "lz4", "ormsgpack"),
}


def require_extra(extra: str, user: str) -> None:
    """Refuse to go on unless every package of ``extra`` (:data:`EXTRAS`) is installed.

    The packages are looked up, not imported (torch or MLflow take seconds to import, and the
    caller imports what it uses next).

    Args:
        extra: the extra's name, a key of :data:`EXTRAS`.
        user: what needs it, for the message (``"the Docker backend"``).

    Raises:
        MissingExtraError: a package of ``extra`` is not installed.
    """
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise missing_extra(extra, user, missing)


def missing_extra(extra: str, user: str, missing: Sequence[str]) -> MissingExtraError:
    """The one-line error saying that ``user`` needs ``extra``, whose ``missing`` packages are
    not installed, and the command that installs it."""
    packages = ", ".join(missing)
    verb = "is" if len(missing) == 1 else "are"
    return MissingExtraError(
        f"{user} needs the {extra} extra, and {packages} {verb} not installed: "
        f'pip install "dlsched[{extra}]" (from a checkout: pip install -e ".[{extra}]")'
    )
