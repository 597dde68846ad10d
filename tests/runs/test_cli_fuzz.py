"""Random command lines, run in this process: each gives a result or a project error (a
:class:`~dlsched.envs.errors.DlschedError` printed as one line with exit code 2, or argparse's
exit 2), never an internal error (exit 1 saying so: a bug) nor an exception out of ``main``.

Every (sub)command's options are read from the real parser, so that an option added later is
fuzzed too. Its values come from a pool of valid and invalid ones (negative, empty, not a
number, a path under a file, a misspelt name, a malformed ``KEY=VALUE``). Each command line
starts with options that keep a valid run small (one episode, a few timesteps, no plots); the
random tokens follow and may override them. The Docker engine is out of reach (``DOCKER_HOST``
names a socket that does not exist): a command that needs it must say so, and the shared engine
is never touched. ``calibrate`` is left out: it measures the host for minutes before it needs
the engine; so is ``image prune``, which removes images.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from dlsched.runs.cli import build_parser, main
from dlsched.runs.tracking.target import ENV_VAR

TINY = """\
name: tiny
kind: inference
interval_s: 10
horizon_s: 30
workers: {count: 1, cores: 4}
jobs: [{workload: resnet50, targets_s: [20]}]
"""

# Options that keep a valid run of each command small; the random tokens come after them.
COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("scenarios",): (),
    ("evaluate",): ("--no-progress", "--no-plots", "--episodes", "1", "--scenario", "tiny.yaml"),
    ("compare",): ("--no-plot",),
    ("train",): (
        "--no-progress", "--eval-every", "0", "--timesteps", "8", "--scenario", "tiny.yaml",
        "--hp", "n_steps=8", "--hp", "batch_size=8", "--hp", "n_epochs=1",
    ),
    ("validate",): (
        "--no-progress", "--no-plots", "--episodes", "1", "--scenario", "tiny.yaml",
        "--against", "replay:measured",
    ),
    ("bench", "replay"): (
        "--episodes", "1", "--scenario", "tiny.yaml", "--seconds", "0.01", "--num-envs", "1",
        "--containers", "1",
    ),
    ("bench", "tracking"): ("--episodes", "1", "--scenario", "tiny.yaml", "--policy", "default"),
    ("bench", "docker"): ("--steps", "1", "--containers", "1"),
    ("docker", "cleanup"): ("--episode", "fuzz-no-such-episode"),
    ("image", "status"): (),
    ("image", "build"): (),
    ("reproduce",): (
        "--only", "dqoes-vb1-target20-all-in-b", "--episodes", "1", "--no-readings",
        "--no-progress",
    ),
    ("baselines", "report"): ("--scenario", "tiny.yaml", "--policy", "default"),
    ("runs", "repair"): ("--dry-run",),
    ("runs", "sync"): ("dlsched-runs",),
    ("models", "convert"): ("model.zip",),
}  # fmt: skip

VALUES = [
    "", "-5", "-1", "0", "1", "2", "abc", "1e3", "nan", "inf", "3.5", "/dev/null/x",
    "/dev/null/x.png", "plot.png", "plot.txt", "out", "tiny.yaml", "nosuch.yaml",
    "dqoes-resnet50-burst-target20", "dqoes-resnet50-burst-target2", "flowcon-poc-3", "default",
    "dqoes", "dqoes,oracle", "default,default", "nosuch", "ppo", "a2c", "sac", "replay",
    "docker", "replay:measured", "replay:nosuch", "stock", "tuned", "json", "markdown",
    "learning_rate=abc", "n_steps=0", "batch_size=-1", "gamma=0.9", "lerning_rate=1", "a=b", "=",
    "dqoes.alpha=0.2", "dqoes.alpha=abc", "default.x=1", "log_std_init=-1", "64,64", "0,x",
    "sqlite:///fuzz.db", "runs:/nosuch/model", "model.zip", "all", "relative", "usage",
    "--trust-pickle",
]  # fmt: skip


def options(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings of ``parser`` (``--help`` aside)."""
    return [
        string
        for action in parser._actions
        for string in action.option_strings
        if string not in ("-h", "--help")
    ]


def subparser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        choices = next(
            action.choices
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
        )
        parser = choices[name]
    return parser


OPTIONS = {path: options(subparser(path)) for path in COMMANDS}


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    path = draw(st.sampled_from(sorted(COMMANDS)))
    tokens = st.sampled_from([*OPTIONS[path], *VALUES])
    return [*path, *COMMANDS[path], *draw(st.lists(tokens, max_size=6))]


@contextlib.contextmanager
def isolated(folder: os.PathLike[str], store_uri: str) -> Iterator[None]:
    """Run from ``folder`` with the test store, no reachable Docker engine, and the tiny
    scenario beside it."""
    with (
        contextlib.chdir(folder),
        mock.patch.dict(
            os.environ, {ENV_VAR: store_uri, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
        ),
    ):
        with open("tiny.yaml", "w", encoding="utf-8") as stream:
            stream.write(TINY)
        yield


def run_command_line(argv: list[str]) -> tuple[int, str, str]:
    """``dlsched ARGV`` in this process: its exit code (argparse's included), who gave it, and
    what it printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code, source = main(argv), "dlsched"
        except SystemExit as exit_:
            code, source = int(exit_.code or 0), "argparse"
    return code, source, err.getvalue()


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory, mlflow_store) -> tuple[os.PathLike[str], str]:
    return tmp_path_factory.mktemp("cli-fuzz"), mlflow_store[1]


@settings(
    max_examples=60 * int(os.environ.get("DLSCHED_FUZZ_SCALE", "1")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(argv=command_lines())
@example(argv=["evaluate", "--scenario", "tiny.yaml", "--policy", "default", "--seed", "-5"])
@example(argv=["compare", "--plot", "/dev/null/x.png"])
@example(argv=["compare", "--scenario", "nosuch", "--no-plot"])
@example(argv=["train", *COMMANDS[("train",)], "--hp", "learning_rate=abc"])
@example(argv=["evaluate", *COMMANDS[("evaluate",)], "--policy", "default", "--tracking-uri", ""])
def test_a_random_command_line_gives_a_result_or_a_project_error(fuzz_folder, argv):
    folder, store_uri = fuzz_folder
    with isolated(folder, store_uri):
        code, source, err = run_command_line(argv)
    # 0: done; 1: nothing to compare; 2: a user's mistake, said in one line. A bug is exit 1
    # saying "internal error"; 130/143 would be a signal.
    assert code in (0, 1, 2), f"dlsched {' '.join(argv)} exited {code}: {err}"
    assert "internal error" not in err, f"dlsched {' '.join(argv)}: {err}"
    event(f"exit {code} ({source})")
