"""What every baseline shares: its parameters are its constructor's keyword arguments."""

from __future__ import annotations

import inspect
from typing import ClassVar

from dlsched.envs.errors import PolicyError
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies.policy import HandcraftedPolicy, ParamValue


class Baseline(HandcraftedPolicy):
    """A handcrafted scheduler from the papers (or a reference point such as ``default``).

    Subclasses take every parameter as a keyword argument of ``__init__`` and keep it, validated,
    in an attribute of the same name; :meth:`params` reports them from that, so tracking and the
    ``dlsched baselines`` listing never drift from the constructor.
    """

    #: The kinds of job the algorithm schedules: a paper's scheduler reads the progress its
    #: jobs report (latency or loss), and on the other kind it would read nothing and leave
    #: every limit alone, a ``default`` row under its name.
    kinds: ClassVar[tuple[JobKind, ...]] = (JobKind.INFERENCE, JobKind.TRAINING)

    def params(self) -> dict[str, ParamValue]:
        return {name: getattr(self, name) for name in parameter_names(type(self))}

    def check_scenario(self, scenario: Scenario) -> None:
        """Refuse a scenario of a kind this baseline does not schedule, before it runs."""
        if scenario.kind not in self.kinds:
            raise PolicyError(
                f"baseline {self.name!r} schedules {' and '.join(k.value for k in self.kinds)} "
                f"jobs, but scenario {scenario.name!r} has {scenario.kind.value} jobs; run it "
                f"on {_a(self.kinds[0].value)} scenario (`dlsched scenarios` lists their kinds)"
            )


def round_due(last_s: float | None, now_s: float, interval_s: float) -> bool:
    """Whether a scheduler that runs a round every ``interval_s`` runs one at ``now_s``, its
    last round at ``last_s`` (``None``: none yet): once the interval has passed, to within a
    nanosecond, so that steps which add up to it in floating point make it."""
    return last_s is None or now_s - last_s >= interval_s - 1e-9


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def parameter_names(cls: type[Baseline]) -> tuple[str, ...]:
    """The keyword arguments of a baseline's constructor, in declaration order."""
    signature = inspect.signature(cls.__init__)
    return tuple(name for name in signature.parameters if name != "self")


def parameter_defaults(cls: type[Baseline]) -> dict[str, object]:
    """Each constructor argument of a baseline with its default (the paper's value)."""
    signature = inspect.signature(cls.__init__)
    return {
        name: parameter.default
        for name, parameter in signature.parameters.items()
        if name != "self"
    }
