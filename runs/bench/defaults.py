"""What each benchmark measures unless told otherwise, apart from the benchmarks themselves.

``dlsched bench --help`` shows these defaults; the benchmarks that import MLflow
(:mod:`.tracking`) or torch and Stable-Baselines3 (:mod:`.training`) are imported only when they
run, so the help answers at once.
"""

from __future__ import annotations

#: ``dlsched bench tracking``: a paper scenario whose replay episodes take a few milliseconds,
#: so that what tracking adds shows.
TRACKING_SCENARIO = "dqoes-resnet50-burst-target40"
TRACKING_POLICIES: tuple[str, ...] = ("default", "dqoes")
#: ``dlsched bench training``: the README recipe's training scenario.
TRAINING_SCENARIO = "train-inference-mix"
