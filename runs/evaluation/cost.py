"""What an episode costs: the CPU its policy allocated and its jobs used, and the time the policy
took to decide.

The papers behind the baselines score a policy by what its jobs achieve on a fixed worker
(satisfied services, completion times); Autothrottle (NSDI'24) and the Kubernetes autoscalers
it is set against score it by the CPU it allocates while the targets are met. These
are the figures that put a policy on that scale too, step by step (:func:`allocated_cores`,
:func:`used_cores`) and per episode (:func:`cost_metrics`, fields of
:class:`~dlsched.runs.evaluation.metrics.EpisodeMetrics`).

**Cores allocated** at a step are the cores the limits in force hold: per worker, the sum over
its active jobs (running or migrating) of ``limit x worker cores``, where an uncapped job
(limit 1) holds the whole worker, at most the worker's cores; summed over the workers. A worker
without an active job holds none. The limits are those the backend reads back (on Docker, the
quota in force), not those a policy asked for.

Why at most the worker's cores: Docker accepts quotas that add up to more than the worker has,
and together they then hold no more than the worker: the jobs share its cores. Counted as set,
three uncapped services on a 2-core worker would cost 6 cores, and a policy that left them so
would look three times as costly as one capping each at a third, whereas both hold the same 2
cores: what another job could be given beside them is the same (none). The cap keeps the figure
what the worker gives up. Autothrottle counts the allocation as it is set; where the quotas of a
worker add up to no more than its cores, the two counts agree. Overcommitment stays visible in a
step's ``total_limit``.

**Cores used** at a step are the CPU every job used over the step's interval, summed.

**Per episode**, each is averaged over the episode's steps weighted by the seconds each covered
(a Docker step's interval is its wall time, not always the scenario's); the reset is no step.
The outcome per core-second divides the outcome by the allocated core-seconds (the cores
allocated times the seconds, summed): for inference, the satisfied service-seconds (the services
in DQoES's set S at a step's end times the step's seconds); for training, the iterations
completed.

**Decision time** is the wall time of the policy's call that decides a step (a handcrafted
policy's ``act``, a learned one's ``predict``; nothing of the environment), measured by the
feed that calls it (:class:`~dlsched.policies.feed.BatchedStep`); per episode, its median and
99th percentile, in milliseconds.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import Telemetry

if TYPE_CHECKING:
    from dlsched.runs.evaluation.records import StepRecord

#: The percentile of the decision times reported beside their median.
DECISION_PERCENTILE = 99.0


def allocated_cores(telemetry: Telemetry) -> float:
    """The cores the limits in force hold at ``telemetry``'s time (see the module docstring)."""
    cores = {worker.index: worker.cores for worker in telemetry.workers}
    held: dict[int, list[float]] = {}
    for job in telemetry.active_jobs:
        if job.worker is not None:
            held.setdefault(job.worker, []).append(job.limit * cores[job.worker])
    # summed exactly: ten limits of a tenth hold the worker, not a hair less, so that two
    # policies that hold the same cores rank alike
    return math.fsum(min(cores[worker], math.fsum(limits)) for worker, limits in held.items())


def used_cores(telemetry: Telemetry) -> float:
    """The cores every job used over the interval before ``telemetry``, summed."""
    return math.fsum(job.cpu_usage for job in telemetry.jobs)


def cost_metrics(kind: JobKind, steps: Sequence[StepRecord]) -> dict[str, float | None]:
    """An episode's cost metrics from its steps (the reset first), by
    :class:`~dlsched.runs.evaluation.metrics.EpisodeMetrics` field; a figure the episode gives
    no value (no step, no core allocated, no decision timed) is ``None``."""
    seconds = [after.time_s - before.time_s for before, after in itertools.pairwise(steps)]
    taken = steps[1:]
    total_s = math.fsum(seconds)
    core_s = math.fsum(step.cores_allocated * s for step, s in zip(taken, seconds, strict=True))
    used_s = math.fsum(step.cores_used * s for step, s in zip(taken, seconds, strict=True))
    metrics: dict[str, float | None] = {
        "cores_allocated_mean": core_s / total_s if total_s > 0 else None,
        "cores_used_mean": used_s / total_s if total_s > 0 else None,
    }
    if kind is JobKind.INFERENCE:
        satisfied_s = math.fsum(step.satisfied * s for step, s in zip(taken, seconds, strict=True))
        metrics["satisfied_per_core_s"] = satisfied_s / core_s if core_s > 0 else None
    else:
        iterations = sum(c.iterations for c in steps[-1].containers) - sum(
            c.iterations for c in steps[0].containers
        )
        metrics["iterations_per_core_s"] = iterations / core_s if core_s > 0 else None
    decisions = [step.decision_s for step in taken if step.decision_s is not None]
    metrics["decision_ms_median"] = 1000 * statistics.median(decisions) if decisions else None
    metrics["decision_ms_p99"] = (
        1000 * float(np.percentile(decisions, DECISION_PERCENTILE)) if decisions else None
    )
    return metrics
