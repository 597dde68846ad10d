"""What ran: the dlsched version and the git commit of its source, recorded with every run."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path


def dlsched_version() -> str:
    """The installed distribution's version."""
    return metadata.version("dlsched")


def source_commit() -> str | None:
    """The git commit of the dlsched code that runs, if it runs from a git checkout.

    The checkout is the folder holding the source of :mod:`dlsched.runs` (an editable install);
    an installed copy has none, and then nothing is recorded. A checkout with uncommitted
    changes gets ``-dirty`` appended, since the commit alone would not say what ran.
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != root:
            return None
        commit = _git(root, "rev-parse", "HEAD")
        if commit is None:
            return None
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except OSError:  # no git executable
        return None
    return f"{commit}-dirty" if dirty else commit


def _git(root: Path, *args: str) -> str | None:
    completed = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False
    )
    return completed.stdout.strip() if completed.returncode == 0 else None
