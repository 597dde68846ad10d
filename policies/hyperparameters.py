"""The hyperparameters given to a Stable-Baselines3 algorithm (``dlsched train --hp KEY=VALUE``)
and the keywords given to its policy (``--policy-kwarg KEY=VALUE``), checked before anything is
trained or tracked.

SB3 checks few of its arguments, and late: a misspelt name is a ``TypeError`` of the
constructor, ``batch_size=1`` an ``AssertionError`` once the model is built, ``n_steps=0`` one
too (PPO) or a training that never advances (A2C), a text learning rate an error deep in the
optimiser. Here every name is held against the algorithm's constructor (with the closest name
when it is misspelt), every value against the parameter's annotation, and the numbers against
the ranges SB3 asserts or documents (:data:`RANGES`).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dlsched.envs.arguments import check_value, did_you_mean, parameters, type_hints
from dlsched.envs.errors import ArgumentError
from dlsched.policies.learned import algorithm_class

RESERVED: Mapping[str, str] = {
    "policy": "--network and --slot-agents choose it",
    "env": "--scenario chooses it",
    "seed": "use --seed",
    "device": "dlsched trains on the CPU",
    "verbose": "dlsched reports progress itself",
    "policy_kwargs": "use --policy-kwarg (and --net-arch)",
    "_init_setup_model": "dlsched builds the model",
    "tensorboard_log": "dlsched logs to MLflow",
}
"""Arguments of the algorithms that dlsched sets itself, with what to use instead."""


@dataclass(frozen=True)
class Range:
    """The numbers a hyperparameter may take.

    Attributes:
        holds: whether a number is in the range.
        text: the range as a message says it (``"> 0"``).
    """

    holds: Callable[[float], bool]
    text: str


_POSITIVE = Range(lambda value: value > 0, "> 0")
_AT_LEAST_ONE = Range(lambda value: value >= 1, ">= 1")
_NON_NEGATIVE = Range(lambda value: value >= 0, ">= 0")
_FRACTION = Range(lambda value: 0 <= value <= 1, "in [0, 1]")

RANGES: Mapping[str, Range] = {
    "learning_rate": _POSITIVE,
    "n_steps": _AT_LEAST_ONE,
    "batch_size": Range(lambda value: value > 1, "> 1 (SB3 normalises over a batch)"),
    "n_epochs": _AT_LEAST_ONE,
    "gamma": _FRACTION,
    "gae_lambda": _FRACTION,
    "clip_range": _POSITIVE,
    "clip_range_vf": _POSITIVE,
    "ent_coef": _NON_NEGATIVE,
    "vf_coef": _NON_NEGATIVE,
    "max_grad_norm": _POSITIVE,
    "rms_prop_eps": _POSITIVE,
    "target_kl": _POSITIVE,
    "sde_sample_freq": Range(lambda value: value >= -1, ">= -1 (-1: only at rollout starts)"),
    "stats_window_size": _AT_LEAST_ONE,
    "buffer_size": _AT_LEAST_ONE,
    "learning_starts": _NON_NEGATIVE,
    "tau": _FRACTION,
    "train_freq": _AT_LEAST_ONE,
    "gradient_steps": Range(lambda value: value >= 1 or value == -1, ">= 1, or -1"),
    "target_update_interval": _AT_LEAST_ONE,
    "policy_delay": _AT_LEAST_ONE,
    "target_policy_noise": _NON_NEGATIVE,
    "target_noise_clip": _NON_NEGATIVE,
}
"""The ranges of the algorithms' numeric hyperparameters (SB3's documentation and the asserts
of its constructors), by name, for whichever algorithm takes it."""


def hyperparameter_problems(algo: str, hyperparams: Mapping[str, object]) -> list[str]:
    """What is wrong with ``hyperparams`` for the algorithm ``algo``, one sentence each.

    Args:
        algo: the algorithm's name (``ppo``, ``a2c``, ``sac``, ``td3``).
        hyperparams: the keyword arguments given to its constructor.
    """
    cls = algorithm_class(algo)
    names = [name for name in parameters(cls.__init__) if name not in RESERVED]
    hints = type_hints(cls.__init__)
    problems: list[str] = []
    for key, value in hyperparams.items():
        problem = _name_problem(key, cls.__name__, "hyperparameter", names, RESERVED)
        problem = problem or _value_problem(cls.__name__, key, value, hints.get(key))
        if problem:
            problems.append(problem)
    return problems


POLICY_RESERVED: Mapping[str, str] = {
    "observation_space": "the scenario sets it",
    "action_space": "the scenario sets it",
    "lr_schedule": "use --hp learning_rate",
    "net_arch": "use --net-arch",
}
"""Arguments of the policies that dlsched or SB3 sets itself, with what to use instead."""


def policy_keyword_problems(policy: type, kwargs: Mapping[str, object]) -> list[str]:
    """What is wrong with the names of ``kwargs`` for the policy class ``policy``, one sentence
    each (its values SB3 checks as it builds the policy).

    Args:
        policy: the policy class (``SlotActorCriticPolicy``, SB3's ``ActorCriticPolicy``, ...).
        kwargs: the keyword arguments given to its constructor.
    """
    names = [name for name in _keywords(policy) if name not in POLICY_RESERVED]
    problems = [
        _name_problem(key, policy.__name__, "policy keyword", names, POLICY_RESERVED)
        for key in kwargs
    ]
    return [problem for problem in problems if problem]


def _name_problem(
    key: str, owner: str, kind: str, names: Sequence[str], reserved: Mapping[str, str]
) -> str:
    """Why ``key`` is no ``kind`` a user may give ``owner`` (one of ``names``, none of
    ``reserved``); ``""`` if it is one."""
    if key in reserved:
        return f"{kind} {key!r} is set by dlsched ({reserved[key]})"
    if key not in names:
        return (
            f"{owner} takes no {kind} {key!r}{did_you_mean(key, names)}; it takes "
            f"{', '.join(names)}"
        )
    return ""


def _keywords(policy: type) -> list[str]:
    """The keyword parameters of ``policy``'s constructor, with those of the constructors it
    passes ``**kwargs`` on to (its bases'), in the order they are declared."""
    names: list[str] = []
    for cls in policy.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        names += [name for name in parameters(init) if name not in names]
        takes_more = any(
            parameter.kind is inspect.Parameter.VAR_KEYWORD
            for parameter in inspect.signature(init).parameters.values()
        )
        if not takes_more:
            break
    return names


def _value_problem(algorithm: str, key: str, value: object, annotation: object) -> str:
    if key == "ent_coef" and isinstance(value, str) and algorithm == "SAC":
        return _sac_ent_coef_problem(value)
    if annotation is not None:
        try:
            check_value(key, value, annotation, algorithm)
        except ArgumentError as error:
            return str(error)
    allowed = RANGES.get(key)
    if allowed is None or not isinstance(value, numbers.Real) or isinstance(value, bool):
        return ""
    if not math.isfinite(float(value)) or not allowed.holds(float(value)):
        return f"{key}={value!r} for {algorithm}: expected a number {allowed.text}"
    return ""


def _sac_ent_coef_problem(value: str) -> str:
    """SAC learns its entropy coefficient from ``auto`` or ``auto_<initial value > 0>``."""
    head, _, initial = value.partition("_")
    try:
        valid = head == "auto" and (not initial or float(initial) > 0)
    except ValueError:
        valid = False
    if valid:
        return ""
    return (
        f"ent_coef={value!r} for SAC: expected a number >= 0, 'auto' or 'auto_<initial value>' "
        f"(e.g. auto_0.1)"
    )
