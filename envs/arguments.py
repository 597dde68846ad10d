"""The arguments of the dlsched environments, checked and resolved where they enter.

``gym.make("dlsched/Inference-v0", **kwargs)`` and ``gym.make_vec(...)`` hand their keyword
arguments to the environment's constructor, which checks them here before it uses any (one
check for the single and the batched environments, :func:`environment_setup`): a misspelt name
gets the closest one, a value of the wrong type or range names what was expected, and
``backend_options`` are held against the backend's own constructor. ``reset(seed=)`` is checked
here too. Each refusal is an :class:`~dlsched.envs.errors.ArgumentError` (or an
:class:`~dlsched.envs.errors.UnknownNameError` for an unknown backend or reward), never a
``TypeError`` or ``AttributeError`` from inside; a keyword the environments do not take is an
:class:`~dlsched.envs.errors.UnexpectedArgumentError`, a ``TypeError`` as Python's own is.

:func:`check_value` holds a value against a simple type annotation (numbers, strings, paths,
``X | None``); the options of a backend and the hyperparameters of an SB3 algorithm are checked
with it.
"""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import difflib
import inspect
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from dlsched.envs.backend import Backend
from dlsched.envs.backend_registry import backend_class, make_backend
from dlsched.envs.errors import ArgumentError, ScenarioError, UnexpectedArgumentError
from dlsched.envs.extras import require_extra
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.placement import Placer
from dlsched.envs.rendering import RENDER_MODES
from dlsched.envs.rewards import ColumnReward, RewardFn, reward_function
from dlsched.envs.scenarios.file_format import check_scenario, load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.user_values import is_number, is_whole, shown

#: Default lowest limit, as a fraction of a worker: 2% keeps a starved job alive and measurable.
DEFAULT_LIMIT_FLOOR = 0.02

#: The keyword arguments the environments take.
ENV_ARGUMENTS: tuple[str, ...] = (
    "scenario",
    "backend",
    "reward",
    "interval_s",
    "placer",
    "limit_floor",
    "backend_options",
    "render_mode",
)


@dataclass(frozen=True)
class EnvironmentSetup:
    """What an environment's keyword arguments resolve to.

    Attributes:
        scenario: the scenario, loaded, with ``interval_s`` applied, and checked by the rules of
            scenario files and against the environment's kind.
        backend: the backend (built from its name and options, or the object given).
        reward_name: the reward's name (a function's ``__name__``).
        reward: the named reward, or ``None`` for a function of one's own.
        custom_reward: the function of one's own, or ``None``.
        placer: the placer of arriving jobs; ``None``: Docker Swarm's spread.
        limit_floor: the lowest limit.
        layout: the observation layout.
    """

    scenario: Scenario
    backend: Backend
    reward_name: str
    reward: ColumnReward | None
    custom_reward: RewardFn | None
    placer: Placer | None
    limit_floor: float
    layout: ObservationLayout

    @property
    def slots(self) -> int:
        """Container slots on all workers: the length of an action."""
        return self.layout.workers * self.layout.slots_per_worker

    def observation_space(self) -> gym.spaces.Box:
        """One episode's observation space."""
        return gym.spaces.Box(0.0, 1.0, self.layout.shape, dtype=np.float32)

    def action_space(self) -> gym.spaces.Box:
        """One episode's action space: a limit per slot, a fraction of its worker."""
        return gym.spaces.Box(0.0, 1.0, (self.slots,), dtype=np.float32)


def environment_setup(
    env_id: str,
    kind: JobKind,
    defaults: tuple[str, str],
    given: Mapping[str, Any],
) -> EnvironmentSetup:
    """Check an environment's keyword arguments (:func:`check_env_arguments`: they come from a
    user, whatever their annotations say) and resolve them.

    Args:
        env_id: the environment's registered id, for messages.
        kind: the kind of job it runs.
        defaults: its default scenario and reward.
        given: its constructor's arguments by name (its ``locals()``): the names of
            :data:`ENV_ARGUMENTS` it takes (one it does not take is ``None``; see
            :class:`~dlsched.envs.InferenceEnv`) and ``unknown``, any other keyword arguments.

    Raises:
        UnexpectedArgumentError: an unknown keyword.
        ArgumentError: a value of the wrong type or range.
        UnknownNameError: an unknown backend, scenario or reward name.
        ScenarioError: the scenario is malformed, too large, or of the other kind.
        MissingExtraError: a part whose extra is not installed (:mod:`dlsched.envs.extras`).
    """
    arguments: dict[str, Any] = {name: given.get(name) for name in ENV_ARGUMENTS}
    check_env_arguments(env_id, **arguments, unknown=given["unknown"])
    scenario, backend, reward = arguments["scenario"], arguments["backend"], arguments["reward"]
    default_scenario, default_reward = defaults
    resolved = resolve_scenario(
        scenario or default_scenario, kind, env_id, interval_s=arguments["interval_s"]
    )
    if isinstance(backend, str):
        backend = make_backend(backend, **dict(arguments["backend_options"] or {}))
    custom = reward if callable(reward) else None
    name = reward if isinstance(reward, str) else default_reward
    return EnvironmentSetup(
        scenario=resolved,
        backend=backend,
        reward_name=getattr(custom, "__name__", "custom") if custom else name,
        reward=None if custom else reward_function(name),
        custom_reward=custom,
        placer=arguments["placer"],
        limit_floor=float(arguments["limit_floor"]),
        layout=ObservationLayout(len(resolved.workers), resolved.slots_per_worker),
    )


class EnvironmentKind:
    """The job kind and defaults an environment fixes, shared by its single and batched
    classes (:mod:`dlsched.envs.inference_env`, :mod:`dlsched.envs.training_env`)."""

    #: The kind of job the environment runs.
    kind: typing.ClassVar[JobKind]
    #: Registered id, for messages.
    env_id: typing.ClassVar[str]
    #: The scenario it runs when given none.
    default_scenario: typing.ClassVar[str]
    #: The reward it pays when given none.
    default_reward: typing.ClassVar[str]

    @classmethod
    def resolve_arguments(cls, given: Mapping[str, Any]) -> EnvironmentSetup:
        """:func:`environment_setup` of this environment's constructor arguments ``given``."""
        return environment_setup(
            cls.env_id, cls.kind, (cls.default_scenario, cls.default_reward), given
        )


def resolve_scenario(
    scenario: str | os.PathLike[str] | Scenario,
    kind: JobKind,
    env_id: str,
    interval_s: float | None = None,
) -> Scenario:
    """Load ``scenario`` by name or path if needed, with ``interval_s`` (if given) in place of
    its own, and check it is of the environment's kind.

    A file is held to the rules of scenario files as it is read; a :class:`Scenario` object, or
    one whose ``interval_s`` the argument changed, is held to the same rules here
    (:func:`~dlsched.envs.scenarios.file_format.check_scenario`), so that an environment never
    runs a scenario no file could describe.

    Raises:
        ScenarioError: the scenario is malformed or too large (naming every bad field), or of
            the other kind (naming the right id).
        UnknownNameError: no shipped scenario has that name.
    """
    given_object = isinstance(scenario, Scenario)
    if isinstance(scenario, str | os.PathLike):
        scenario = load_scenario(scenario if isinstance(scenario, str) else Path(scenario))
    if interval_s is not None:
        scenario = dataclasses.replace(scenario, interval_s=float(interval_s))
    if given_object:
        scenario = check_scenario(scenario)
    elif interval_s is not None:
        scenario = check_scenario(scenario, f"{scenario.name!r} with interval_s={interval_s:g}")
    if scenario.kind is not kind:
        other = (
            "dlsched/Training-v0" if scenario.kind is JobKind.TRAINING else "dlsched/Inference-v0"
        )
        raise ScenarioError(
            f"scenario {scenario.name!r} has {scenario.kind.value} jobs, but {env_id} runs "
            f"{kind.value} jobs; make {other} with it instead"
        )
    return scenario


def check_env_arguments(
    env_id: str,
    *,
    scenario: object,
    backend: object,
    reward: object,
    interval_s: object,
    placer: object,
    limit_floor: object,
    backend_options: object,
    render_mode: object,
    unknown: Mapping[str, object],
) -> None:
    """Refuse keyword arguments of ``env_id`` that it cannot take, before any is used.

    Args:
        env_id: the environment's registered id, for messages.
        scenario, backend, reward, interval_s, placer, limit_floor, backend_options,
            render_mode: the environment's keyword arguments (see
            :class:`~dlsched.envs.InferenceEnv`).
        unknown: any other keyword arguments it was given.

    Raises:
        UnexpectedArgumentError: an unknown keyword.
        ArgumentError: a value of the wrong type or range.
        UnknownNameError: an unknown backend name.
        MissingExtraError: ``rgb_array`` frames without the render extra, or the Docker
            backend without the docker extra.
    """
    for name in unknown:
        raise UnexpectedArgumentError(
            f"{env_id} got an unexpected keyword argument {name!r}"
            f"{did_you_mean(name, ENV_ARGUMENTS)}; its keyword arguments are "
            f"{', '.join(ENV_ARGUMENTS)}"
        )
    if scenario is not None and not isinstance(scenario, str | os.PathLike | Scenario):
        _refuse(
            "scenario",
            scenario,
            "a shipped scenario's name (`dlsched scenarios` lists them), the path of a scenario "
            "YAML file, or a dlsched.envs.scenarios.Scenario",
        )
    if not isinstance(backend, str | Backend):
        _refuse("backend", backend, "a backend name (replay or docker) or a Backend object")
    if reward is not None and not isinstance(reward, str) and not callable(reward):
        _refuse("reward", reward, "a reward name or a function (now, before) -> float")
    if interval_s is not None and not _positive_number(interval_s):
        _refuse("interval_s", interval_s, "a number of seconds > 0, e.g. interval_s=10")
    if placer is not None and not isinstance(placer, Placer):
        _refuse("placer", placer, "a dlsched.envs.Placer, e.g. SpreadPlacer()")
    if not (_positive_number(limit_floor) and _at_most_one(limit_floor)):
        _refuse("limit_floor", limit_floor, "a fraction of a worker in (0, 1], e.g. 0.02")
    _check_backend_options(backend, backend_options)
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ArgumentError(
            f"render_mode={render_mode!r}: expected one of {', '.join(RENDER_MODES)}, or "
            "None to render nothing"
        )
    if render_mode == "rgb_array":  # said at gym.make, not at the first frame
        require_extra("render", "render_mode='rgb_array'")


def check_vector_arguments(num_envs: object, autoreset_mode: object) -> AutoresetMode:
    """Refuse a batched environment's own arguments unless ``num_envs`` is a whole number
    >= 1 and ``autoreset_mode`` Gymnasium's ``NEXT_STEP`` or ``SAME_STEP``; that mode.

    Raises:
        ArgumentError: naming the value and what was expected.
    """
    if not (isinstance(num_envs, numbers.Integral) and is_whole(num_envs) and int(num_envs) >= 1):
        _refuse("num_envs", num_envs, "a whole number >= 1, e.g. num_envs=16")
    try:
        mode = AutoresetMode(autoreset_mode)
    except ValueError:
        mode = AutoresetMode.DISABLED
    if mode is AutoresetMode.DISABLED:
        _refuse(
            "autoreset_mode",
            autoreset_mode,
            f"{AutoresetMode.NEXT_STEP.value!r} or {AutoresetMode.SAME_STEP.value!r} "
            "(gymnasium.vector.AutoresetMode)",
        )
    return mode


def check_seed(seed: object) -> int | None:
    """The ``reset`` seed as Gymnasium takes it (a Python int), or None.

    Raises:
        ArgumentError: not None nor a whole number >= 0.
    """
    if seed is None:
        return None
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and int(seed) >= 0:
        return int(seed)
    raise ArgumentError(
        f"seed={seed!r} ({type(seed).__name__}): expected None or a whole number >= 0, e.g. "
        f"reset(seed=0)"
    )


def check_value(name: str, value: object, annotation: object, where: str) -> None:
    """Refuse ``value`` for the parameter ``name`` unless it is of a type ``annotation`` allows.

    Numbers, strings, booleans, paths and None are told apart (``True`` is not a number, a
    numpy number is one); a class allows its instances, ``Callable`` a callable, ``Literal`` its
    values; a union allows what any of its members does; anything else allows any value.

    Args:
        name: the parameter's name.
        value: the value given.
        annotation: the parameter's type annotation (resolved, not a string).
        where: what takes the parameter, for the message (``"the docker backend"``).

    Raises:
        ArgumentError: no member of ``annotation`` allows ``value``.
    """
    members = _union_members(annotation)
    if any(_allows(member, value) for member in members):
        return
    expected = " or ".join(dict.fromkeys(_describe(member) for member in members))
    raise ArgumentError(
        f"{name}={shown(value)} ({type(value).__name__}) for {where}: expected {expected}"
    )


def _allows(member: object, value: object) -> bool:
    if member in _SIMPLE:
        return _SIMPLE[member][0](value)
    origin = typing.get_origin(member) or member
    if origin is typing.Literal:
        return value in typing.get_args(member)
    if origin is collections.abc.Callable:
        return callable(value)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True  # Any, a TypeVar, a forward reference: nothing to hold it against


def _describe(member: object) -> str:
    if member in _SIMPLE:
        return _SIMPLE[member][1]
    origin = typing.get_origin(member) or member
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(member)))
    if origin is collections.abc.Callable:
        return "a function"
    return f"a {getattr(origin, '__name__', origin)}"


def _check_backend_options(backend: object, options: object) -> None:
    if options is None:
        return
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        _refuse(
            "backend_options",
            options,
            'a mapping of option names to values, e.g. {"workload_threading": "stock"}',
        )
    if not options:
        return
    if not isinstance(backend, str):
        raise ArgumentError(
            f"backend_options={dict(options)!r} apply to a backend given by name; configure "
            f"the {type(backend).__name__} object itself instead"
        )
    cls = backend_class(backend)
    names = parameters(cls.__init__)
    hints = type_hints(cls.__init__)
    for key, value in options.items():
        if key not in names:
            raise ArgumentError(
                f"backend_options: the {backend} backend takes no option {key!r}"
                f"{did_you_mean(key, names)}; its options are {', '.join(names) or 'none'}"
            )
        check_value(key, value, hints.get(key, Any), f"the {backend} backend")


def parameters(function: Callable[..., object]) -> list[str]:
    """The keyword parameters of ``function`` (not ``self`` nor ``*args``/``**kwargs``)."""
    return [
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if name != "self"
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    ]


def type_hints(function: Callable[..., object]) -> dict[str, Any]:
    """The annotations of ``function``'s parameters, resolved; a name its module imports only
    for type checkers (``if TYPE_CHECKING:``) resolves to ``Any``, which accepts anything."""
    try:
        return typing.get_type_hints(function, localns=_TypeCheckingNames(function))
    except TypeError:  # an annotation that is no type (a number, a call's result)
        return {}


class _TypeCheckingNames(dict[str, Any]):
    """The names an annotation of ``function`` may use: its module's, the builtins, and ``Any``
    for any other (one imported only for type checkers, a forward reference to one)."""

    def __init__(self, function: Callable[..., object]) -> None:
        super().__init__()
        self._module = getattr(inspect.unwrap(function), "__globals__", {})

    def __missing__(self, name: str) -> Any:
        if name in self._module:
            return self._module[name]
        return getattr(builtins, name, Any)


def _union_members(annotation: object) -> tuple[object, ...]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return (annotation,)


def _positive_number(value: object) -> bool:
    return is_number(value) and math.isfinite(float(value)) and float(value) > 0


def _at_most_one(value: object) -> bool:
    return is_number(value) and float(value) <= 1.0


_SIMPLE: Mapping[object, tuple[Callable[[object], bool], str]] = {
    int: (is_whole, "a whole number"),
    float: (is_number, "a number"),
    bool: (lambda value: isinstance(value, bool), "true or false"),
    str: (lambda value: isinstance(value, str), "a string"),
    Path: (lambda value: isinstance(value, str | os.PathLike), "a path"),
    type(None): (lambda value: value is None, "None"),
}


def _refuse(name: str, value: object, expected: str) -> typing.NoReturn:
    raise ArgumentError(f"{name}={shown(value)} ({type(value).__name__}): expected {expected}")


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` with the name of ``known`` closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
