"""Every exception dlsched raises on purpose, and its one warning.

All of them derive from :class:`DlschedError`, so a caller (the CLI in particular) can tell a
user's mistake or an unavailable system apart from a bug. Each message names the offending value,
what was expected, and the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TypeVar

from gymnasium.error import ResetNeeded

_T = TypeVar("_T")


class DlschedError(Exception):
    """Base class of every error dlsched raises deliberately."""


class ScenarioError(DlschedError, ValueError):
    """A scenario file or scenario object is malformed; the message lists every bad field."""


class UnknownNameError(DlschedError, KeyError):
    """A name (scenario, workload, policy, reward, backend, ...) that is not registered.

    The message says the name, then the hint (by default the closest known name), then every
    known name: the list may run to hundreds of characters, and the name meant comes first.
    """

    def __init__(self, what: str, name: str, known: Iterable[str], hint: str = "") -> None:
        known_sorted = sorted(known)
        if not hint:
            close = difflib.get_close_matches(name, known_sorted, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else ""
        self._arguments = (what, name, tuple(known_sorted), hint)
        self.message = (
            f"unknown {what} {name!r}."
            + (f" {hint}" if hint else "")
            + f" Known: {', '.join(known_sorted)}."
        )
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.message

    def __reduce__(self) -> tuple[type[UnknownNameError], tuple[str, str, tuple[str, ...], str]]:
        """Built again from its arguments, as a process that ran the work hands it back
        (``dlsched reproduce``'s workers): pickle would call it with the message alone."""
        return type(self), self._arguments


class ArgumentError(DlschedError, ValueError):
    """An argument given to dlsched has the wrong name, type or value: a keyword argument of
    ``gym.make``, a ``reset`` seed, a command-line option such as ``--hp``.

    It is a :class:`ValueError` for wrong types too, so that ``gym.make`` passes it on as it is
    (it rewrites a :class:`TypeError` raised by an environment's constructor). An unknown
    keyword is the exception: :class:`UnexpectedArgumentError`."""


class UnexpectedArgumentError(ArgumentError, TypeError):
    """An environment was given a keyword argument it does not take.

    It is a :class:`TypeError`, as Python's own is for an unexpected keyword argument, and is
    worded as Python words it (``... got an unexpected keyword argument 'frameskip'``) before
    dlsched's part (the name meant, the keywords taken): RL libraries that try an optional
    keyword and drop it on that error (TorchRL's ``GymEnv`` passes ``frameskip``) build the
    environments without it. ``gym.make`` re-raises it with the keyword arguments appended."""


class ResetNeededError(DlschedError, ResetNeeded):
    """An environment (or what steps one: a policy feed, a controlled episode, a training
    wrapper) was stepped, or its telemetry read, before its first ``reset()``.

    Gymnasium's ``OrderEnforcing`` wrapper (what ``gym.make`` returns) says so in its own words;
    ``env.unwrapped`` has no wrapper, and says it here. It is Gymnasium's ``ResetNeeded`` too, so
    a caller written for Gymnasium catches it as it catches the wrapper's. It is raised by
    :func:`require_reset` alone."""


def require_reset(value: _T | None, call: str, subject: str) -> _T:
    """``value``, the state ``subject`` holds once reset, or :class:`ResetNeededError` if it
    holds none: the one place that says a reset is needed.

    Args:
        value: what the reset made (``None``: no reset yet).
        call: what the caller did (``"step()"``), named in the message.
        subject: what was not reset (``"an environment"``), named in the message.
    """
    if value is None:
        raise ResetNeededError(
            f"{call} on {subject} that was not reset: it has no episode yet; call reset() "
            f"before {call}"
        )
    return value


class ActionError(DlschedError, ValueError):
    """An action or decision that the environment refuses (NaN, wrong shape, unknown job)."""


class BackendError(DlschedError, RuntimeError):
    """A backend cannot do what was asked (engine unreachable, image missing, ...)."""


class DockerUnavailableError(BackendError):
    """No Docker engine answers at the configured endpoint."""


class EngineLostError(BackendError):
    """A Docker engine stopped answering in the middle of an episode."""


class ImageMissingError(BackendError):
    """The workload image the Docker backend needs is not on the engine."""


class ProfileError(DlschedError, ValueError):
    """A workload profile data file is malformed."""


class PolicyError(DlschedError, ValueError):
    """A policy cannot be built or loaded (bad parameter, incompatible model, ...)."""


class ModelError(PolicyError):
    """A trained model that cannot be used: a file that is not a dlsched model (truncated, of
    another program), or a model made for another environment (job kind, observation layout)."""


class OutputError(DlschedError, OSError):
    """A file or folder given for dlsched's output cannot be written there (it lies under a
    file, is a folder where a file is expected, or its folder is read-only)."""


class TrackingError(DlschedError, RuntimeError):
    """The MLflow tracking store is unreachable or refuses a write."""


class MissingExtraError(DlschedError, ImportError):
    """An optional part of dlsched is used without its extra installed (``dlsched[docker]``,
    ``dlsched[train]``, ...); the message names the extra to install
    (:func:`dlsched.envs.extras.require_extra`)."""


class HostBusyError(BackendError):
    """A measurement of the host (calibration) was refused because other work held its cores."""


class ActionClippedWarning(UserWarning):
    """An action held entries outside the action space's box ``[0, 1]``, which the environment
    clipped into it; said once per environment (``warnings.simplefilter("error",
    ActionClippedWarning)`` turns it into an error)."""
