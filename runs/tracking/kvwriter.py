"""An SB3 ``KVWriter`` that sends the training logger's values to an MLflow run, in batches.

Stable-Baselines3's :class:`~stable_baselines3.common.logger.Logger` calls every output format's
``write(key_values, key_excluded, step)`` at each ``dump`` (once per rollout for PPO and A2C, every
``log_interval`` episodes for SAC and TD3). One ``log_metric`` call per value is a store round
trip (``docs/tracking.md`` says what it costs), so this writer keeps the values and sends them with
:meth:`MlflowClient.log_batch` when enough have gathered or enough time has passed, and on
:meth:`MlflowKVWriter.flush` and :meth:`MlflowKVWriter.close`.

Only numbers are logged (strings, videos, figures, images and hyper-parameter records are not
metrics), and a key whose ``exclude`` tuple names :data:`FORMAT_NAME` is skipped, the way SB3's
own writers honour ``exclude=("stdout", "log", ...)``.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric
from stable_baselines3.common.logger import KVWriter

from dlsched.envs.errors import TrackingError
from dlsched.runs.tracking.run_logging import MAX_METRICS_PER_CALL, log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, first_line

#: The name by which ``logger.record(key, value, exclude=...)`` keeps a value out of MLflow.
FORMAT_NAME = "mlflow"
#: Seconds after which pending values are sent even if few have gathered.
DEFAULT_FLUSH_INTERVAL_S = 30.0


class MlflowKVWriter(KVWriter):
    """Writes SB3 logger values as metrics of one MLflow run, batched.

    Args:
        client: a client of the tracking store.
        run_id: the run the metrics belong to (it must exist and stay open while training).
        max_pending: send as soon as this many values wait (MLflow takes at most
            1000 metrics per ``log_batch`` call).
        flush_interval_s: send at the first ``write`` this many seconds after the last send.
        clock: seconds from a monotonic clock (injected so tests need no waiting).
        on_failure: if given, a store that refuses a batch is reported to it once and the writer
            stops sending (the values are in the training's ``progress.csv`` for ``dlsched runs
            sync``); without it, :meth:`flush` raises.
    """

    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        max_pending: int = MAX_METRICS_PER_CALL,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[TrackingError], None] | None = None,
    ) -> None:
        if not 1 <= max_pending <= MAX_METRICS_PER_CALL:
            raise TrackingError(
                f"max_pending={max_pending} must be in [1, {MAX_METRICS_PER_CALL}], MLflow's "
                "limit of metrics per log_batch call"
            )
        self.client = client
        self.run_id = run_id
        self.max_pending = max_pending
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._pending: list[Metric] = []
        self._last_flush = clock()
        self.batches_sent = 0
        self.on_failure = on_failure
        self.failure: TrackingError | None = None

    @property
    def pending(self) -> int:
        """How many values wait to be sent."""
        return len(self._pending)

    def write(
        self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0
    ) -> None:
        """Queue every numeric value (at ``step``, SB3's timestep count) and send if due."""
        now_ms = int(time.time() * 1000)
        for key, value in key_values.items():
            excluded = key_excluded.get(key)
            if excluded is not None and FORMAT_NAME in excluded:
                continue
            number = _as_number(value)
            if number is None:
                continue
            self._pending.append(Metric(key, number, now_ms, int(step)))
        due = self._clock() - self._last_flush >= self.flush_interval_s
        if len(self._pending) >= self.max_pending or (due and self._pending):
            self.flush()

    def flush(self) -> None:
        """Send every pending value now.

        Raises:
            TrackingError: the store refused the batch (the values stay pending), unless
                ``on_failure`` was given.
        """
        if self.failure is not None:
            self._pending.clear()  # the store failed: progress.csv keeps them
            return
        while self._pending:
            batch = self._pending[: self.max_pending]
            try:
                log_in_batches(self.client, self.run_id, batch)
            except STORE_ERRORS as error:
                failure = TrackingError(
                    f"MLflow refused {len(batch)} training metrics of run {self.run_id}: "
                    f"{first_line(error)}; check that the tracking store is reachable and the "
                    "run is open"
                )
                if self.on_failure is None:
                    raise failure from error
                self.failure = failure
                self._pending.clear()
                self.on_failure(failure)
                return
            del self._pending[: len(batch)]
            self.batches_sent += 1
        self._last_flush = self._clock()

    def close(self) -> None:
        """Send what is pending (SB3 calls this when the logger closes)."""
        self.flush()


def _as_number(value: Any) -> float | None:
    """``value`` as a finite float if it is a real number (or a one-element array), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        number = float(value)
    elif hasattr(value, "item"):  # numpy and torch scalars and one-element arrays
        try:
            item = value.item()
        except (ValueError, RuntimeError):  # more than one element
            return None
        if not isinstance(item, numbers.Real):
            return None
        number = float(item)
    else:
        return None
    # MLflow stores NaN and infinities, but they wreck its charts; SB3 logs NaN before the
    # first episode ends (ep_rew_mean of an empty buffer), which is no measurement at all.
    return number if math.isfinite(number) else None
