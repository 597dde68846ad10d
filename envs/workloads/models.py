"""The neural networks of the workloads, defined here so the image needs nothing but torch.

Training models read 8x8 digits; the inference services read digits upsampled to
:data:`SERVICE_IMAGE_SIZE` pixels square, one channel. The service networks follow the shape of
the architectures they are named after (residual basic blocks; stacked 3x3 convolutions with
pooling; inverted residuals with depthwise convolutions), scaled so that a batch takes a few
seconds of one core; their weights are random (seeded), which costs the same CPU as trained ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn

NUM_CLASSES = 10
DIGIT_SIZE = 8
SERVICE_IMAGE_SIZE = 64


class DigitsMLP(nn.Module):
    """A multi-layer perceptron over the 64 pixels.

    Args:
        hidden: units of each hidden layer.
        layers: hidden layers.
    """

    def __init__(self, hidden: int = 1024, layers: int = 2) -> None:
        super().__init__()
        widths = [DIGIT_SIZE * DIGIT_SIZE] + [hidden] * layers
        stack: list[nn.Module] = [nn.Flatten()]
        for width_in, width_out in itertools.pairwise(widths):
            stack += [nn.Linear(width_in, width_out), nn.ReLU()]
        stack.append(nn.Linear(widths[-1], NUM_CLASSES))
        self.net = nn.Sequential(*stack)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class DigitsCNN(nn.Module):
    """A small convolutional network (three 3x3 convolutions, two poolings) over 8x8 digits.

    Args:
        channels: channels of the first two convolutions (the third has twice as many).
    """

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * channels * 2 * 2, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images.unsqueeze(1)).flatten(1))


class DigitsGRU(nn.Module):
    """A GRU that reads a digit row by row (8 steps of 8 pixels) and classifies its last state.

    Args:
        hidden: units of the recurrent state.
        layers: stacked GRU layers.
    """

    def __init__(self, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.gru = nn.GRU(DIGIT_SIZE, hidden, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(images)
        return self.classifier(states[:, -1])


class DigitsVAE(nn.Module):
    """A variational autoencoder of the 64 pixels (Gaussian latent, Bernoulli pixels).

    :meth:`forward` returns the reconstruction logits and the latent mean and log-variance, which
    :func:`vae_loss` turns into the negative evidence lower bound.

    Args:
        hidden: units of the encoder's and the decoder's hidden layers.
        latent: dimensions of the latent code.
    """

    def __init__(self, hidden: int = 768, latent: int = 16) -> None:
        super().__init__()
        pixels = DIGIT_SIZE * DIGIT_SIZE
        self.encoder = nn.Sequential(
            nn.Flatten(), nn.Linear(pixels, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.to_mean = nn.Linear(hidden, latent)
        self.to_log_var = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, pixels),
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        encoded = self.encoder(images)
        mean, log_var = self.to_mean(encoded), self.to_log_var(encoded)
        latent = mean + torch.randn_like(mean) * torch.exp(0.5 * log_var)
        return self.decoder(latent), mean, log_var


def vae_loss(
    images: torch.Tensor, logits: torch.Tensor, mean: torch.Tensor, log_var: torch.Tensor
) -> torch.Tensor:
    """Negative evidence lower bound per image: Bernoulli reconstruction plus KL to N(0, I)."""
    reconstruction = nn.functional.binary_cross_entropy_with_logits(
        logits, images.flatten(1), reduction="sum"
    )
    divergence = -0.5 * torch.sum(1 + log_var - mean.pow(2) - log_var.exp())
    return (reconstruction + divergence) / images.shape[0]


class BasicBlock(nn.Module):
    """A residual block of two 3x3 convolutions with batch norm (ResNet's basic block)."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(channels_out),
            nn.ReLU(),
            nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels_out),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels_out),
            )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(features) + self.shortcut(features))


class ResNetService(nn.Module):
    """A ResNet-style classifier: a stem, then stages of basic blocks that halve the resolution.

    The defaults are ResNet-18's widths and depth with a 3x3 stem (the small-image variant).

    Args:
        widths: channels of each stage.
        blocks: basic blocks per stage.
    """

    def __init__(self, widths: tuple[int, ...] = (64, 128, 256, 512), blocks: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(1, widths[0], 3, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        ]
        channels = widths[0]
        for stage, width in enumerate(widths):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, width, stride))
                channels = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, NUM_CLASSES)]
        self.net = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class VGGService(nn.Module):
    """A VGG-style classifier: stacks of 3x3 convolutions, each stack closed by max pooling.

    The defaults are VGG-16's convolution stacks with a smaller classifier head.

    Args:
        stacks: the channels of the convolutions of each stack.
        image_size: the side of the square input images.
    """

    def __init__(
        self,
        stacks: tuple[tuple[int, ...], ...] = (
            (64, 64),
            (128, 128),
            (256, 256, 256),
            (512, 512, 512),
            (512, 512, 512),
        ),
        image_size: int = SERVICE_IMAGE_SIZE,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 1
        for stack in stacks:
            for width in stack:
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU()]
                channels = width
            layers.append(nn.MaxPool2d(2))
        size = image_size // 2 ** len(stacks)
        layers += [
            nn.Flatten(),
            nn.Linear(channels * size * size, 512),
            nn.ReLU(),
            nn.Linear(512, NUM_CLASSES),
        ]
        self.net = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise convolution, 1x1 linear projection."""

    def __init__(self, channels_in: int, channels_out: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = channels_in * expansion
        self.residual = stride == 1 and channels_in == channels_out
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, channels_out, 1, bias=False),
            nn.BatchNorm2d(channels_out),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = self.body(features)
        return features + out if self.residual else out


class MobileNetService(nn.Module):
    """A MobileNetV2-style classifier: a stem, then inverted-residual stages.

    The defaults are MobileNetV2's stages with a stride-1 stem (the small-image variant).

    Args:
        stages: ``(channels, blocks, stride)`` per stage.
        expansion: the expansion factor of every block.
    """

    def __init__(
        self,
        stages: tuple[tuple[int, int, int], ...] = (
            (16, 1, 1),
            (24, 2, 2),
            (32, 3, 2),
            (64, 4, 2),
            (96, 3, 1),
            (160, 3, 2),
            (320, 1, 1),
        ),
        expansion: int = 6,
    ) -> None:
        super().__init__()
        stem = 32
        layers: list[nn.Module] = [
            nn.Conv2d(1, stem, 3, padding=1, bias=False),
            nn.BatchNorm2d(stem),
            nn.ReLU6(),
        ]
        channels = stem
        for width, blocks, stride in stages:
            for block in range(blocks):
                layers.append(
                    InvertedResidual(channels, width, stride if block == 0 else 1, expansion)
                )
                channels = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, NUM_CLASSES)]
        self.net = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


#: The network of each workload, by workload name (the sizes live in the classes' defaults).
MODEL_BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "mlp-digits": DigitsMLP,
    "cnn-digits": DigitsCNN,
    "gru-digits": DigitsGRU,
    "vae-digits": DigitsVAE,
    "resnet-svc": ResNetService,
    "vgg-svc": VGGService,
    "mobilenet-svc": MobileNetService,
}
