"""The typed decision a policy returns: limits, and the migrations it asks for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Migration:
    """Move a running job to another worker (it keeps its progress, pays the migration cost)."""

    job_id: str
    worker: int


@dataclass(frozen=True)
class Decision:
    """What a policy decides for one interval.

    Attributes:
        limits: CPU limit per job id, as a fraction of its worker's cores in ``[0, 1]``; jobs it
            does not name keep the limit they have.
        migrations: jobs to move to another worker.
    """

    limits: Mapping[str, float] = field(default_factory=dict)
    migrations: tuple[Migration, ...] = ()


@dataclass(frozen=True)
class Placement:
    """Where an arriving (or migrating) job runs: a worker and a slot on it."""

    job_id: str
    worker: int
    slot: int


#: Placements (or migrations, the destination as a placement) handed to a backend at once.
Placements = Sequence[Placement]
