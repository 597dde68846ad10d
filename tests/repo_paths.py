"""Paths of the repository that tests read, wherever in ``tests/`` the test module lives.

A test module imports them (``from repo_paths import FIXTURES``) instead of building them from
its own ``__file__``, which breaks when the module moves to another folder.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: The repository's root: the folder of ``pyproject.toml``.
REPOSITORY = TESTS.parent
README = REPOSITORY / "README.md"
#: The table of every input limit and the variable that raises it.
LIMITS_DOC = REPOSITORY / "docs" / "limits.md"
#: Files the tests read: saved models, recorded episodes, scenario files.
FIXTURES = TESTS / "fixtures"
#: An inference model saved by dlsched 0.1.0, before the observation layout was recorded.
MODEL_V0_1_0 = FIXTURES / "model-v0.1.0"
#: A small scenario file, ``big``: one 8-core worker, one resnet50 service with a 20 s target.
SCENARIO_BIG = FIXTURES / "scenario-big.yaml"
