"""The files the default store leaves in a checkout are ignored by git, so that ``git status``
after the main job shows nothing new (issue 34 item 14: ``?? mlflow.db.lock``)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from repo_paths import REPOSITORY

#: The default store, its lock (dlsched's) and sqlite's files beside it.
STORE_FILES = ("mlflow.db", "mlflow.db.lock", "mlflow.db-wal", "mlflow.db-shm", "mlflow.db-journal")


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPOSITORY / ".git").exists(), reason="not a git checkout"
)
@pytest.mark.parametrize("name", STORE_FILES)
def test_the_store_s_files_are_ignored(name):
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--quiet", name], cwd=REPOSITORY, timeout=30
    )
    assert done.returncode == 0, f"{name} is not in .gitignore"
