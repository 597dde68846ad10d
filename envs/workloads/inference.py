"""The inference services: answer batches of digit images in a loop, one JSON line per batch.

A service takes the next ``batch_size`` digits of the data set (cycling through it), upsamples
them to :data:`~.models.SERVICE_IMAGE_SIZE` pixels square, normalises them and classifies them.
The latency it reports covers all of that, as a client of the service would see it. It runs
until stopped (SIGTERM), or for a given number of batches.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import torch
from torch import nn

from .catalog import WorkloadSpec
from .cpu_quota import Threading, thread_keeper
from .digits import load_digits
from .events import BatchEvent, StartEvent, emit
from .models import MODEL_BUILDERS, SERVICE_IMAGE_SIZE
from .stopping import StopRequest


class DigitBatches:
    """Consecutive batches of the digits, as the services' input tensors.

    Args:
        batch_size: images per batch.
    """

    def __init__(self, batch_size: int) -> None:
        digits = torch.from_numpy(load_digits().scaled_images()).unsqueeze(1)
        self._digits = digits
        self._mean = float(digits.mean())
        self._std = float(digits.std())
        self._batch_size = batch_size

    def images(self, batch: int) -> torch.Tensor:
        """The preprocessed images of 0-based ``batch``: ``(batch_size, 1, side, side)``."""
        count = self._digits.shape[0]
        indices = (torch.arange(self._batch_size) + batch * self._batch_size) % count
        upsampled = nn.functional.interpolate(
            self._digits[indices],
            size=(SERVICE_IMAGE_SIZE, SERVICE_IMAGE_SIZE),
            mode="bilinear",
            align_corners=False,
        )
        return (upsampled - self._mean) / self._std


def run_inference(
    spec: WorkloadSpec,
    batches: int | None,
    start_batch: int,
    batch_size: int,
    seed: int,
    stop: StopRequest,
    out: TextIO = sys.stdout,
    threading: Threading = "tuned",
) -> int:
    """Serve ``spec``'s model, printing its events to ``out``; return the exit status (0).

    Args:
        spec: the inference workload.
        batches: stop after this many batches in all (those before ``start_batch`` included);
            ``None`` serves until stopped.
        start_batch: batches answered before this run (the count continues from it).
        batch_size: images per batch.
        seed: seeds the random weights.
        stop: set when the service is asked to stop; checked after each batch.
        out: where the JSON lines go.
        threading: how the thread pool is sized (:mod:`.cpu_quota`).
    """
    torch.manual_seed(seed)
    model = MODEL_BUILDERS[spec.name]()
    model.eval()
    inputs = DigitBatches(batch_size)
    threads = thread_keeper(threading)

    emit(StartEvent(time.time(), spec.name, "inference", threads.update(), start_batch), out)
    batch = start_batch
    while (batches is None or batch < batches) and not stop.requested:
        used_threads = threads.update()
        started = time.perf_counter()
        with torch.inference_mode():
            model(inputs.images(batch)).argmax(dim=1)
        latency_s = time.perf_counter() - started
        batch += 1
        emit(BatchEvent(time.time(), batch, latency_s, batch_size, used_threads), out)
    return 0
