"""Building baselines by name: the registry, its parameters and its refusals."""

from __future__ import annotations

import argparse
import math

import pytest

from dlsched import baselines
from dlsched.baselines import make
from dlsched.envs.errors import PolicyError, UnknownNameError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.cli import COMMAND_MODULES
from dlsched.runs.commands import baselines as baselines_command
from dlsched.runs.evaluation import run_episode

PAPER_DEFAULTS: dict[str, dict[str, object]] = {
    "dqoes": {"alpha": 0.1, "beta": 0.1, "iv_initial_s": 10.0, "listener": "journal"},
    "flowcon": {"itval_s": 30.0, "alpha_initial": 0.03, "threshold_lists": "NL+WL"},
    "specon": {"alpha": 0.1, "interval_s": 10.0, "max_migrations_per_round": 1},
    "autothrottle": {"initial_margin": 3.0, "scale_up_multiple": 3.0, "tower_interval_s": 60.0},
    "k8s-autoscaler": {"average_utilization": 50, "stabilization_window_s": 200.0},
}


def test_names() -> None:
    assert baselines.names() == (
        "default",
        "equal",
        "dqoes",
        "flowcon",
        "specon",
        "tradl",
        "autothrottle",
        "k8s-autoscaler",
        "oracle",
    )


@pytest.mark.parametrize("name", baselines.names())
def test_make_with_defaults_reports_its_parameters(name: str) -> None:
    policy = baselines.make(name)
    assert policy.name == name
    assert policy.params() == baselines.defaults(name)
    for param, value in PAPER_DEFAULTS.get(name, {}).items():
        assert policy.params()[param] == value


def test_oracle_says_it_cheats() -> None:
    cls = baselines.baseline_class("oracle")
    assert "Cheating" in cls.__name__
    assert "cheats" in (cls.__doc__ or "")


def test_parameters_override_defaults() -> None:
    policy = baselines.make("dqoes", beta=0.2, listener="preprint")
    assert policy.params()["beta"] == 0.2
    assert policy.params()["listener"] == "preprint"


def test_unknown_name_lists_known_and_suggests() -> None:
    with pytest.raises(UnknownNameError) as error:
        baselines.make("dqos")
    message = str(error.value)
    assert "'dqos'" in message and "Did you mean 'dqoes'?" in message
    for name in baselines.names():
        assert name in message


@pytest.mark.parametrize(
    ("spec", "how"),
    [
        ("dqoes:alpha=0.3", "--set dqoes.alpha=0.3"),
        ("dqoes(alpha=0.3)", "--set dqoes.alpha=0.3"),
        ("flowcon lam=2", "--set flowcon.lam=2"),
        ("k8s-autoscaler:average_utilization=60", "--set k8s-autoscaler.average_utilization=60"),
        ("specon:", None),  # nothing after the name: the closest name is the hint
    ],
)
def test_a_name_with_parameters_written_into_it_says_how_to_set_them(
    spec: str, how: str | None
) -> None:
    with pytest.raises(UnknownNameError) as error:
        baselines.make(spec)
    message = str(error.value)
    if how is None:
        assert "Did you mean 'specon'?" in message
    else:
        assert f"Parameters are not part of the name: `{how}` on the command line" in message


def test_unknown_parameter_is_named_with_the_valid_ones() -> None:
    with pytest.raises(PolicyError) as error:
        baselines.make("dqoes", gamma=0.1)
    message = str(error.value)
    assert "'gamma'" in message
    assert "alpha" in message and "beta" in message and "iv_initial_s" in message
    with pytest.raises(PolicyError, match="parameters: none"):
        baselines.make("default", alpha=0.1)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dqoes", {"alpha": math.nan}),
        ("dqoes", {"beta": 0.0}),
        ("dqoes", {"beta": -0.1}),
        ("dqoes", {"iv_initial_s": math.inf}),
        ("dqoes", {"alpha": "0.1"}),
        ("dqoes", {"listener": "draft"}),
        ("flowcon", {"itval_s": 0}),
        ("flowcon", {"cl_floor": "none"}),
        ("flowcon", {"placement": 1}),
        ("specon", {"max_migrations_per_round": 1.5}),
        ("specon", {"min_job_gap": 0}),
        ("specon", {"alpha": -1.0}),
        ("tradl", {"deprioritised_share": 1.5}),
        ("oracle", {"aim": math.nan}),
        ("autothrottle", {"tower": "vw"}),
        ("autothrottle", {"tower_targets": "0.2,0.1"}),
        ("autothrottle", {"tower_targets": "low,high"}),
        ("autothrottle", {"usage_window": 0}),
        ("k8s-autoscaler", {"average_utilization": 0.5}),
        ("k8s-autoscaler", {"stabilization_window_s": 5.0}),
    ],
)
def test_bad_values_are_refused(name: str, params: dict[str, object]) -> None:
    with pytest.raises(PolicyError) as error:
        baselines.make(name, **params)
    (param,) = params
    assert param in str(error.value)


def test_cli_lists_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="dlsched")
    baselines_command.register(parser.add_subparsers())
    args = parser.parse_args(["baselines"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    for name in baselines.names():
        assert f"{name}:" in out
    assert "    iv_initial_s = 10.0" in out
    assert "baselines" in COMMAND_MODULES


@pytest.mark.parametrize(
    ("name", "scenario"),
    [
        ("flowcon", "dqoes-resnet50-burst-target20"),
        ("specon", "dqoes-resnet50-burst-target20"),
        ("tradl", "dqoes-resnet50-burst-target20"),
        ("dqoes", "flowcon-10-random"),
        ("autothrottle", "flowcon-10-random"),
    ],
)
def test_a_baseline_refuses_a_scenario_of_the_kind_it_does_not_schedule(
    name: str, scenario: str
) -> None:
    chosen = load_scenario(scenario)
    with pytest.raises(PolicyError) as raised:
        run_episode(chosen, make(name), seed=0)
    message = str(raised.value)
    assert f"baseline {name!r}" in message and f"has {chosen.kind.value} jobs" in message
    for both in ("default", "equal", "k8s-autoscaler", "oracle"):
        assert set(type(make(both)).kinds) == set(JobKind)


def test_evaluate_refuses_a_baseline_of_the_wrong_kind_before_any_episode(capsys) -> None:
    from dlsched.runs.cli import main

    code = main(["evaluate", "--scenario", "dqoes-resnet50-burst-target20", "--policy",
                 "default,flowcon", "--no-tracking", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "dlsched evaluate: error: baseline 'flowcon' schedules training jobs" in err
