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
#: An inference model saved by dlsched 0.1.0, before the observation layout was recorded and
#: before models were data (its statistics a pickle): dlsched refuses to load it.
MODEL_V0_1_0 = FIXTURES / "model-v0.1.0"
#: The same model converted by ``dlsched models convert`` (statistics as JSON, card format 4,
#: model.zip the same bytes): the tests' loadable model of that version.
MODEL_V0_1_0_CONVERTED = FIXTURES / "model-v0.1.0-converted"
#: Each shipped model's actions on the first 40 steps of one episode (seed 100, stepped through
#: ``TelemetryFeed`` with the model's own deterministic actions), and the observations,
#: recorded with the models as they shipped before models were data (their statistics a
#: pickle; dlsched at 6863cc0, before ``dlsched models convert`` converted them):
#: ``<name>.observations``, ``<name>.actions`` and ``<name>.scenario``.
PRETRAINED_ACTIONS = FIXTURES / "pretrained-actions-pickled.npz"
#: The inference model of the README's first recipe (PPO, usage-scaled actions, two stacked
#: frames, a log standard deviation per slot, the sixteen original features), shipped as
#: ``pretrained:ppo-inference-mix`` until the shipped models were retrained to be judged on every
#: scenario of their kind (#43), converted to data.
MODEL_FIRST_RECIPE = FIXTURES / "model-first-recipe"
#: A small scenario file, ``big``: one 8-core worker, one resnet50 service with a 20 s target.
SCENARIO_BIG = FIXTURES / "scenario-big.yaml"
