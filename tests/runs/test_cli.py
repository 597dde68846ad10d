"""The command line as a newcomer meets it: quick to answer, plain help, forgiving of typos."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.runs.cli import COMMANDS, build_parser, main
from dlsched.runs.parser import ListOption, Parser, deprecated_alias

HEAVY = ("torch", "stable_baselines3", "mlflow", "matplotlib")

#: Runs the CLI in a fresh interpreter and prints which heavy packages it imported.
PROBE = """
import contextlib, io, json, sys
from dlsched.runs.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["scenarios"],
        ["scenarios", "dqoes-varied-burst"],
        ["baselines"],
        ["evalute"],
        ["evaluate", "--help"],
        ["evaluate", "--scenario", "dqoes-varied-burst", "--policy", "dqoes", "--epsiodes", "3"],
        ["compare", "--help"],
        ["validate", "--help"],
        ["bench", "tracking", "--help"],
        ["bench", "training", "--help"],
        ["runs", "--help"],
        ["reproduce", "--list"],
        ["train", "--help"],
        ["train", "--scenario", "train-inference-mix", "--timesteps", "5", "--epsiodes", "3"],
    ],
)
def test_light_commands_import_no_torch_sb3_mlflow_or_matplotlib(argv: list[str]) -> None:
    probe = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_an_untracked_evaluation_imports_no_mlflow_matplotlib_or_scipy_stats(
    tmp_path: Path,
) -> None:
    # two seeds, so that the summary's confidence interval is computed (a t quantile)
    heavy = (*HEAVY, "scipy.stats")
    evaluate = ["evaluate", "--scenario", "dqoes-resnet50-burst-target40", "--policy",
                "default", "--episodes", "2", "--no-progress"]  # fmt: skip
    untracked = _imported(heavy, [*evaluate, "--no-tracking"], tmp_path)
    assert untracked == []
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # tracked without plots: MLflow, but no matplotlib
    assert _imported(heavy, [*evaluate, "--no-plots", "--tracking-uri", uri], tmp_path) == [
        "mlflow"
    ]
    assert (tmp_path / "mlflow.db").is_file()


def _imported(heavy: tuple[str, ...], argv: list[str], folder: Path) -> list[str]:
    """The heavy packages a command that must succeed imported."""
    probe = PROBE.format(heavy=heavy).replace(
        "main(sys.argv[1:])", "assert main(sys.argv[1:]) == 0"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_train_s_light_algorithm_names_are_those_it_trains() -> None:
    from dlsched.policies.learned import ALGORITHMS
    from dlsched.runs.training.config import ALGORITHM_NAMES

    assert tuple(ALGORITHMS) == ALGORITHM_NAMES


def test_the_command_table_matches_each_command_s_own_help() -> None:
    parser = build_parser()  # every command in full
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {action.dest: action.help for action in commands._choices_actions}
    assert helps == COMMANDS
    for name in COMMANDS:
        assert hasattr(importlib.import_module(f"dlsched.runs.commands.{name}"), "register")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_is_plain_text(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text, text  # reST literals of docstrings
    assert "%%" not in text and "%(" not in text, text


def test_every_action_mode_of_train_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    from dlsched.policies.agent_actions import ActionMode

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    help_text = text.rsplit("--actions {", 1)[1].split("--max-step MAX_STEP", 1)[0]
    for mode in ActionMode:
        assert f"; {mode.value} " in help_text or f": {mode.value} " in help_text, help_text


def test_a_misspelt_option_gets_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            ["evaluate", "--scenario", "dqoes-varied-burst", "--policy", "dqoes", "--epsiodes", "3"]
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "dlsched evaluate: error: unrecognized --epsiodes; did you mean --episodes?\n"
        "(see dlsched evaluate --help)\n"
    )


def test_a_misspelt_required_option_is_named_not_said_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 34 item 5: argparse said "--policy is required", never naming --polcy."""
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "evaluate",
                "--scenario",
                "dqoes-varied-burst",
                "--polcy",
                "default",
                "--episodes",
                "1",
            ]
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "dlsched evaluate: error: unrecognized --polcy; did you mean --policy?\n"
        "(see dlsched evaluate --help)\n"
    )
    with pytest.raises(SystemExit):  # abbreviations argparse takes are not misspellings
        main(["evaluate", "--scen", "dqoes-varied-burst"])
    assert capsys.readouterr().err.startswith(
        "dlsched evaluate: error: the following arguments are required: --policy\n"
    )


def test_a_refusal_is_its_line_then_where_the_usage_is(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35 item 8: the 8-line usage came before the one line that matters."""
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--scenario", "dqoes-varied-burst"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "dlsched evaluate: error: the following arguments are required: --policy",
        "(see dlsched evaluate --help)",
    ]


def test_a_misspelt_command_or_choice_gets_the_one_meant_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["evalute"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        "dlsched: error: argument COMMAND: invalid choice 'evalute'; did you mean 'evaluate'? "
        "(choose from 'scenarios', "
    )
    with pytest.raises(SystemExit):
        main(["evaluate", "--scenario", "x", "--backend", "dockr"])
    assert capsys.readouterr().err.startswith(
        "dlsched evaluate: error: argument --backend: invalid choice 'dockr'; did you mean "
        "'docker'? (choose from 'replay', 'docker')\n"
    )


def test_list_options_take_commas_and_repetition_alike() -> None:
    parser = Parser(prog="t")
    parser.add_argument("--policy", action=ListOption, default=["default"])
    assert parser.parse_args([]).policy == ["default"]
    assert parser.parse_args(["--policy", "a,b"]).policy == ["a", "b"]
    assert parser.parse_args(["--policy", "a", "--policy", "b,c"]).policy == ["a", "b", "c"]


def test_a_renamed_option_keeps_its_old_name_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = Parser(prog="dlsched t")
    parser.add_argument("--episodes", type=int, default=1)
    deprecated_alias(parser, "--seeds", "--episodes")
    assert parser.parse_args(["--episodes", "4"]).episodes == 4
    assert capsys.readouterr().err == ""
    assert parser.parse_args(["--seeds", "3"]).episodes == 3
    assert capsys.readouterr().err == (
        "dlsched t: warning: --seeds is deprecated and will be removed; use --episodes\n"
    )
    assert "--seeds" not in parser.format_help()


def test_calibrate_writes_under_the_working_directory_not_the_installed_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 12: calibrate used to write its profiles into the package tree by default."""
    import dlsched.envs

    monkeypatch.chdir(tmp_path)
    args = build_parser(["calibrate"]).parse_args(["calibrate"])
    written = Path(args.output_dir).resolve()
    assert written == tmp_path / "dlsched-profiles"
    assert Path(dlsched.envs.__file__).resolve().parent.parent not in written.parents


@pytest.mark.parametrize(
    ("options", "drawn"),
    [
        ([], False),
        (["--backend", "docker"], True),
        (["--episode-plots"], True),
        (["--backend", "docker", "--no-episode-plots"], False),
    ],
)
def test_episode_plots_are_drawn_by_default_only_where_episodes_are_slow(
    options: list[str], drawn: bool
) -> None:
    from dlsched.runs.commands.evaluate import episode_plots

    args = build_parser().parse_args(
        ["evaluate", "--scenario", "docker-training-4", "--policy", "default", *options]
    )
    assert episode_plots(args) is drawn


@pytest.mark.parametrize("command", ["evaluate", "validate"])
def test_out_beside_no_tracking_is_refused_not_ignored(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-tracking keeps no local records: an --out beside it used to be ignored silently."""
    out = tmp_path / "records"
    argv = [command, "--scenario", "docker-training-4", "--policy", "default", "--episodes", "1"]
    code = main([*argv, "--no-tracking", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"dlsched {command}: error: --out {out} with --no-tracking" in err
    assert "drop --no-tracking to keep the records" in err
    assert not out.exists()


def test_a_bug_is_one_line_naming_its_log_and_exit_1(capsys, tmp_path, monkeypatch):
    from dlsched.runs.commands import compare, scenarios

    def buggy(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(scenarios, "run", buggy)
    code = main(["scenarios"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "dlsched scenarios: internal error (a bug of dlsched" in err
    assert "--verbose" not in err  # scenarios has no such option
    log = Path(err.split("(traceback: ")[1].split(";")[0])
    assert "ZeroDivisionError: a bug" in log.read_text() and "Traceback" in log.read_text()
    monkeypatch.setattr(compare, "run", buggy)
    with pytest.raises(ZeroDivisionError):  # --verbose: the traceback in the terminal
        main(["compare", "--verbose"])


def test_a_log_that_cannot_be_written_never_fails_the_command(capsys, tmp_path, monkeypatch):
    """Issue 44 items 4 and 5: a log folder that cannot be made (read-only) raised out of
    MLflow's first log message, and a full disk out of the traceback written after a refusal;
    each ended the command in chained tracebacks. The log goes to the system's temporary folder
    instead; where nothing takes it (``/dev/full`` fails every write with ENOSPC), the command
    says so and ends as it would have."""
    import errno
    import logging
    import tempfile

    from dlsched.runs import command_log
    from dlsched.runs.commands import scenarios

    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a folder cannot be made under a file, even by root
    monkeypatch.setattr(command_log, "LOG_FOLDER", blocked / "logs")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    log = command_log.CommandLog.open("evaluate")
    logging.getLogger("mlflow").info("Creating initial MLflow database tables...")
    assert log.path.parent == tmp_path / "temp" / "dlsched"
    assert "Creating initial" in log.path.read_text()

    full = command_log.CommandLog([Path("/dev/full")])
    assert not full.record_exception(ValueError("x"))
    assert full.lost is not None and full.lost.errno == errno.ENOSPC

    def bug(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(command_log, "LOG_FOLDER", Path("/dev/full"))  # its folder is no folder
    monkeypatch.setattr(tempfile, "tempdir", "/dev/full")
    monkeypatch.setattr(scenarios, "run", bug)
    assert main(["scenarios"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ZeroDivisionError: a bug" in err
    assert "its traceback could not be written to /dev/full/dlsched/scenarios-" in err


def test_a_mistake_leaves_no_log_behind(capsys, tmp_path, monkeypatch):
    """Issue 34 item 11: every refused command wrote dlsched-runs/logs/<cmd>-*.log here, and a
    tracked one an empty mlflow.db (the default store, here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for argv in (
        ["scenarios", "nosuch"],
        ["evaluate", "--scenario", "nosuch", "--policy", "default"],
        ["evaluate", "--scenario", "dqoes-varied-burst", "--policy", "nosuch", "--no-tracking"],
        ["train", "--scenario", "dqoes-varied-burst", "--timesteps", "0"],
        ["train", "--scenario", "dqoes-varied-burst", "--timesteps", "100", "--n-envs", "100000"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dlsched {argv[0]}: error: ") and "(details: " not in err
    assert list(tmp_path.iterdir()) == []


def test_only_commands_that_use_mlflow_or_docker_offer_verbose(capsys) -> None:
    """Issue 34 item 13: scenarios offered --verbose for "MLflow's own log messages"."""
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        offered = "--verbose" in capsys.readouterr().out
        assert offered is (command not in ("scenarios", "baselines")), command
