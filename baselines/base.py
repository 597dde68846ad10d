"""What every baseline shares: its parameters are its constructor's keyword arguments."""

from __future__ import annotations

import inspect

from dlsched.policies.policy import HandcraftedPolicy, ParamValue


class Baseline(HandcraftedPolicy):
    """A handcrafted scheduler from the papers (or a reference point such as ``default``).

    Subclasses take every parameter as a keyword argument of ``__init__`` and keep it, validated,
    in an attribute of the same name; :meth:`params` reports them from that, so tracking and the
    ``dlsched baselines`` listing never drift from the constructor.
    """

    def params(self) -> dict[str, ParamValue]:
        return {name: getattr(self, name) for name in parameter_names(type(self))}


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
