"""The training workloads: minibatch training on the digits, one JSON line per iteration.

A job trains for ``iterations`` iterations (its whole length, counting those done before a
restart) and prints an ``iteration`` event after each, then ``done``. Minibatches are drawn
without replacement, one fresh permutation of the data per epoch; permutation ``e`` depends only
on the seed and ``e``, so a job restarted at iteration ``K`` sees the data it would have seen.

Restarting (a migration): with ``checkpoint``, a job stopped by SIGTERM writes its model,
optimiser and random state there after its current iteration, and a job started with a
checkpoint file present resumes from it. Without one, ``start_iteration`` only shifts the count
and the data order; the model starts from its initial weights.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from torch import nn

from .catalog import WorkloadSpec
from .cpu_quota import Threading, thread_keeper
from .digits import load_digits
from .events import DoneEvent, IterationEvent, StartEvent, emit
from .models import MODEL_BUILDERS, DigitsVAE, vae_loss
from .stopping import StopRequest

LEARNING_RATE = 1e-3
#: Exit status of a job stopped before its last iteration (128 + SIGTERM, as a shell reports it).
EXIT_STOPPED = 143


class MinibatchSampler:
    """Index batches of a data set: epoch-wise permutations that depend only on (seed, epoch).

    Args:
        size: items in the data set.
        batch_size: items per batch; the remainder of each epoch's permutation is skipped.
        seed: the job's seed.
    """

    def __init__(self, size: int, batch_size: int, seed: int) -> None:
        self._size = size
        self._batch_size = batch_size
        self._seed = seed
        self._per_epoch = max(1, size // batch_size)
        self._epoch = -1
        self._permutation = np.arange(size)

    def indices(self, iteration: int) -> np.ndarray:
        """The item indices of the batch of 0-based ``iteration``."""
        epoch, position = divmod(iteration, self._per_epoch)
        if epoch != self._epoch:
            self._permutation = np.random.default_rng([self._seed, epoch]).permutation(self._size)
            self._epoch = epoch
        start = position * self._batch_size
        # With a batch larger than the data set, an epoch is one batch of the whole permutation.
        return self._permutation[start : start + self._batch_size]


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> tuple[float, float | None]:
    """One optimisation step on a minibatch; returns its loss and accuracy (``None`` for a VAE)."""
    optimizer.zero_grad()
    if isinstance(model, DigitsVAE):
        loss = vae_loss(images, *model(images))
        accuracy = None
    else:
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
        accuracy = float((logits.argmax(dim=1) == labels).float().mean())
    loss.backward()
    optimizer.step()
    return float(loss.detach()), accuracy


def save_checkpoint(
    path: Path, workload: str, iteration: int, model: nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Write the training state after ``iteration`` to ``path``, atomically."""
    partial = path.with_name(path.name + ".partial")
    torch.save(
        {
            "workload": workload,
            "iteration": iteration,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
        },
        partial,
    )
    os.replace(partial, path)


def load_checkpoint(
    path: Path, workload: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> int:
    """Restore the state saved at ``path`` into ``model`` and ``optimizer``; return its iteration.

    Raises:
        SystemExit: the checkpoint belongs to another workload.
    """
    state = torch.load(path, weights_only=True)
    if state["workload"] != workload:
        raise SystemExit(
            f"checkpoint {path} is of workload {state['workload']!r}, not {workload!r}: "
            "give each job its own checkpoint path"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["iteration"])


def run_training(
    spec: WorkloadSpec,
    iterations: int,
    start_iteration: int,
    batch_size: int,
    seed: int,
    checkpoint: Path | None,
    stop: StopRequest,
    out: TextIO = sys.stdout,
    threading: Threading = "tuned",
) -> int:
    """Train ``spec``'s model, printing its events to ``out``; return the exit status.

    Args:
        spec: the training workload.
        iterations: the job's total iterations, those before ``start_iteration`` included.
        start_iteration: iterations already done (ignored when a checkpoint is resumed).
        batch_size: samples per iteration.
        seed: seeds the initial weights, the data order and the VAE's sampling.
        checkpoint: where to save the state when stopped and resume it from, or ``None``.
        stop: set when the job is asked to stop; checked after each iteration.
        out: where the JSON lines go.
        threading: how the thread pool is sized (:mod:`.cpu_quota`).

    Returns:
        0 after the last iteration, :data:`EXIT_STOPPED` when stopped before it.
    """
    torch.manual_seed(seed)
    model = MODEL_BUILDERS[spec.name]()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    if checkpoint is not None and checkpoint.is_file():
        start_iteration = load_checkpoint(checkpoint, spec.name, model, optimizer)
    digits = load_digits()
    images = torch.from_numpy(digits.scaled_images())
    labels = torch.from_numpy(digits.labels)
    sampler = MinibatchSampler(len(digits), batch_size, seed)
    threads = thread_keeper(threading)

    emit(StartEvent(time.time(), spec.name, "training", threads.update(), start_iteration), out)
    for iteration in range(start_iteration + 1, iterations + 1):
        used_threads = threads.update()
        batch = torch.from_numpy(sampler.indices(iteration - 1))
        loss, accuracy = train_step(model, optimizer, images[batch], labels[batch])
        emit(IterationEvent(time.time(), iteration, loss, accuracy, used_threads), out)
        if stop.requested and iteration < iterations:
            if checkpoint is not None:
                save_checkpoint(checkpoint, spec.name, iteration, model, optimizer)
            return EXIT_STOPPED
    emit(DoneEvent(time.time(), iterations), out)
    return 0
