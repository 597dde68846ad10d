"""``dlsched bench tracking``: what tracking adds to an evaluation, as a ratio to none.

The same evaluation (a paper scenario on the replay backend, the same policies and seeds) runs
four times in one process: untracked; tracked as ``dlsched evaluate`` tracks by default (local
records, MLflow runs, metrics and artifacts, the evaluation's timeline plot); tracked without
plots; and tracked with every episode's plots too (``--episode-plots``). The store is a fresh sqlite
file in a temporary folder unless ``--tracking-uri`` names another, and it is created before
the clock starts, since MLflow's one-off schema migration (about 2 s) is not a per-evaluation
cost; its time is reported on its own, and a one-seed tracked evaluation with every plot warms
up what a process imports once (MLflow's tracker, matplotlib), as an untracked one warms up the
evaluation.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.errors import DlschedError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.bench.defaults import TRACKING_POLICIES, TRACKING_SCENARIO
from dlsched.runs.tracking.store import connect
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.tracked_evaluation import (
    EvaluationRequest,
    evaluate_tracked,
    evaluate_untracked,
)

DEFAULT_SCENARIO = TRACKING_SCENARIO
DEFAULT_POLICIES = TRACKING_POLICIES


@dataclass(frozen=True)
class TrackingBenchResult:
    """The figures of ``dlsched bench tracking`` (seconds unless a ratio).

    Attributes:
        scenario: the scenario evaluated.
        policies: the policies evaluated.
        episodes: episodes in each of the three runs.
        tracking_uri: the store timed.
        store_setup_s: connecting to (and, for a new sqlite file, creating) the store.
        untracked_s: the evaluation alone.
        tracked_s: the evaluation tracked as by default.
        tracked_no_plots_s: the same without plots.
        tracked_episode_plots_s: the same with every episode's plots.
        ratio: ``tracked_s / untracked_s``.
        ratio_no_plots: ``tracked_no_plots_s / untracked_s``.
        ratio_episode_plots: ``tracked_episode_plots_s / untracked_s``.
        overhead_per_episode_s: ``(tracked_s - untracked_s) / episodes``.
    """

    scenario: str
    policies: tuple[str, ...]
    episodes: int
    tracking_uri: str
    store_setup_s: float
    untracked_s: float
    tracked_s: float
    tracked_no_plots_s: float
    tracked_episode_plots_s: float
    ratio: float
    ratio_no_plots: float
    ratio_episode_plots: float
    overhead_per_episode_s: float

    def report(self) -> str:
        return "\n".join(
            [
                f"{self.scenario} on replay, {', '.join(self.policies)}: {self.episodes} "
                f"episodes per run; store {self.tracking_uri}",
                f"  store setup (not counted)     {self.store_setup_s:8.2f} s",
                f"  untracked                     {self.untracked_s:8.2f} s",
                f"  tracked                       {self.tracked_s:8.2f} s   ratio "
                f"{self.ratio:.2f} ({self.overhead_per_episode_s * 1000:.0f} ms per episode)",
                f"  tracked, no plots             {self.tracked_no_plots_s:8.2f} s   ratio "
                f"{self.ratio_no_plots:.2f}",
                f"  tracked, every episode's plots{self.tracked_episode_plots_s:8.2f} s   ratio "
                f"{self.ratio_episode_plots:.2f}",
            ]
        )


def bench_tracking(
    scenario: str = DEFAULT_SCENARIO,
    policies: Sequence[str] = DEFAULT_POLICIES,
    episodes: int = 3,
    tracking_uri: str | None = None,
) -> TrackingBenchResult:
    """Time an evaluation untracked, tracked, tracked without plots and with every plot.

    Args:
        scenario: a scenario name or path.
        policies: baseline names.
        episodes: seeds (0 ... episodes-1) per policy.
        tracking_uri: the store; ``None`` makes a new sqlite file in a temporary folder.
    """

    if episodes < 1 or not policies:
        raise DlschedError(
            f"episodes={episodes}, policies={list(policies)}; give at least one of each"
        )

    def request(seeds: int = episodes) -> EvaluationRequest:  # fresh policies each run
        return EvaluationRequest(
            load_scenario(scenario),
            tuple(make(name) for name in policies),
            tuple(range(seeds)),
            "replay",
        )

    def tracked(
        client: MlflowClient,
        target: TrackingTarget,
        out: Path,
        plots: bool,
        every: bool = False,
        seeds: int = episodes,
    ) -> None:
        outcome = evaluate_tracked(
            request(seeds),
            client,
            target,
            out,
            plots=plots,
            progress=False,
            warn=_to_stderr,
            episode_plots=every,
        )
        if outcome.failure is not None:
            raise outcome.failure

    with tempfile.TemporaryDirectory(prefix="dlsched-bench-tracking-") as scratch:
        folder = Path(scratch)
        uri = tracking_uri or f"sqlite:///{folder / 'mlflow.db'}"
        target = TrackingTarget(uri, "--tracking-uri")
        start = time.perf_counter()
        # MLflow fixes a sqlite store's artifact folder (./mlruns) when the client first opens
        # it: open it from the scratch folder so the benchmark leaves nothing behind
        with contextlib.chdir(folder):
            client = connect(target)
        store_setup_s = time.perf_counter() - start
        # warm-up of both paths: imports (the tracker, matplotlib and its fonts are imported by
        # the first tracked evaluation, not by the untracked one), profile loading
        evaluate_untracked(request(), progress=False)
        tracked(client, target, folder / "warm-up", True, every=True, seeds=1)
        untracked_s = _timed(lambda: evaluate_untracked(request(), progress=False))
        tracked_s = _timed(lambda: tracked(client, target, folder / "runs", True))
        tracked_no_plots_s = _timed(lambda: tracked(client, target, folder / "runs", False))
        tracked_episode_plots_s = _timed(
            lambda: tracked(client, target, folder / "runs", True, every=True)
        )
    count = len(policies) * episodes
    return TrackingBenchResult(
        scenario=scenario,
        policies=tuple(policies),
        episodes=count,
        tracking_uri=uri,
        store_setup_s=store_setup_s,
        untracked_s=untracked_s,
        tracked_s=tracked_s,
        tracked_no_plots_s=tracked_no_plots_s,
        tracked_episode_plots_s=tracked_episode_plots_s,
        ratio=tracked_s / untracked_s,
        ratio_no_plots=tracked_no_plots_s / untracked_s,
        ratio_episode_plots=tracked_episode_plots_s / untracked_s,
        overhead_per_episode_s=(tracked_s - untracked_s) / count,
    )


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)
