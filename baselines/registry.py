"""The baselines by name: ``make(name, **params)`` builds one, ``names()`` lists them."""

from __future__ import annotations

import re

from dlsched.baselines.autothrottle import Autothrottle
from dlsched.baselines.base import Baseline, parameter_defaults, parameter_names
from dlsched.baselines.default import DockerDefault
from dlsched.baselines.dqoes import DQoES
from dlsched.baselines.equal import EqualShare
from dlsched.baselines.flowcon import FlowCon
from dlsched.baselines.k8s_autoscaler import K8sAutoscaler
from dlsched.baselines.oracle import CheatingOracle
from dlsched.baselines.specon import SpeCon
from dlsched.baselines.tradl import TRADL
from dlsched.envs.errors import PolicyError, UnknownNameError

BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls
    for cls in (
        DockerDefault,
        EqualShare,
        DQoES,
        FlowCon,
        SpeCon,
        TRADL,
        Autothrottle,
        K8sAutoscaler,
        CheatingOracle,
    )
}


def names() -> tuple[str, ...]:
    """The registered baseline names, in a stable order."""
    return tuple(BASELINES)


def baseline_class(name: str) -> type[Baseline]:
    """The class registered as ``name``.

    Raises:
        UnknownNameError: no baseline has that name; the message lists them and the closest.
    """
    if name not in BASELINES:
        raise UnknownNameError("baseline", name, BASELINES, _parameters_hint(name))
    return BASELINES[name]


def _parameters_hint(name: str) -> str:
    """How to set parameters, if ``name`` is a baseline's name with them written into it
    (``dqoes:alpha=0.2``, ``dqoes(alpha=0.2)``); ``""`` otherwise."""
    found = re.fullmatch(r"\s*([a-z0-9]+(?:-[a-z0-9]+)*)\W+(.*?)\W*", name)
    if found is None or found[1] not in BASELINES or not found[2]:
        return ""
    baseline, rest = found[1], found[2]
    assignment = re.match(r"(\w+)\s*=\s*([^,;)\s]+)", rest)
    param, value = assignment.groups() if assignment else ("PARAM", "VALUE")
    return (
        f"Parameters are not part of the name: `--set {baseline}.{param}={value}` on the "
        f"command line, make({baseline!r}, {param}=...) in Python."
    )


def defaults(name: str) -> dict[str, object]:
    """The parameters of baseline ``name`` with their defaults (the papers' values)."""
    return parameter_defaults(baseline_class(name))


def make(name: str, **params: object) -> Baseline:
    """Build the baseline registered as ``name`` with ``params`` overriding its defaults.

    Raises:
        UnknownNameError: ``name`` is not a baseline.
        PolicyError: a parameter is unknown to it or has a bad value; the message names it and
            lists the valid ones.
    """
    cls = baseline_class(name)
    valid = parameter_names(cls)
    for param in params:
        if param not in valid:
            listing = ", ".join(valid) if valid else "none"
            raise PolicyError(
                f"baseline {name!r} has no parameter {param!r}; its parameters: {listing}"
            )
    return cls(**params)
