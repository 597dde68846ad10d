"""The workloads: their names, kinds and default sizes (no torch needed to read it).

Default sizes were chosen by measurement on the development host (see the measured profiles in
``envs/profiles/measured/`` for what they give): a training job's default iterations take 20 to
120 s on one core, an inference batch takes a few seconds on one core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WorkloadKind = Literal["training", "inference"]


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload program.

    Attributes:
        name: the name on the command line and in scenarios.
        kind: ``"training"`` (ends after its iterations) or ``"inference"`` (a service).
        description: what it computes, in one line.
        batch_size: samples per training iteration, or images per inference batch.
        iterations: default iterations of a training job; ``None`` for a service.
    """

    name: str
    kind: WorkloadKind
    description: str
    batch_size: int
    iterations: int | None = None

    @property
    def unit(self) -> Literal["iteration", "batch"]:
        """What one unit of progress is: a training iteration or an inference batch."""
        return "iteration" if self.kind == "training" else "batch"


WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        WorkloadSpec(
            "mlp-digits",
            "training",
            "multi-layer perceptron classifying the 64 pixels of each digit (Adam)",
            batch_size=256,
            iterations=1250,
        ),
        WorkloadSpec(
            "cnn-digits",
            "training",
            "three-layer convolutional classifier of 8x8 digits (Adam)",
            batch_size=256,
            iterations=2000,
        ),
        WorkloadSpec(
            "gru-digits",
            "training",
            "two-layer GRU reading each digit row by row, classifying its last state (Adam)",
            batch_size=128,
            iterations=1400,
        ),
        WorkloadSpec(
            "vae-digits",
            "training",
            "variational autoencoder of the 64 pixels, loss = negative ELBO per image (Adam)",
            batch_size=256,
            iterations=1500,
        ),
        WorkloadSpec(
            "resnet-svc",
            "inference",
            "ResNet-18-style classifier answering batches of digits upsampled to 64x64",
            batch_size=100,
        ),
        WorkloadSpec(
            "vgg-svc",
            "inference",
            "VGG-16-style classifier answering batches of digits upsampled to 64x64",
            batch_size=100,
        ),
        WorkloadSpec(
            "mobilenet-svc",
            "inference",
            "MobileNetV2-style classifier answering batches of digits upsampled to 64x64",
            batch_size=100,
        ),
    )
}
