"""Commands stopped as users stop them: Ctrl-C, ``timeout`` (SIGTERM), ``kill -9``.

Real ``dlsched`` processes on a real sqlite store; afterwards, and after one more command on the
store, no run is ``RUNNING``; an interrupted training has a model that loads.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.interruption import Interrupted, deferred, interruptible
from dlsched.runs.policy_specs import resolve_policy

EPISODE_S = 300.0  # 30 replay steps: an episode lasts long enough to be cut in the middle


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    scenario = dataclasses.replace(load_scenario("dqoes-varied-burst"), horizon_s=EPISODE_S)
    path = tmp_path / "scenario.yaml"
    path.write_text(dump_scenario(scenario))
    return path


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.01)


def _episodes_on_disk(folder: Path) -> int:
    return len(list(folder.glob("dlsched-runs/*/*/episode.json")))


def _statuses(uri: str) -> dict[str, str]:
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {run.info.run_name: run.info.status for run in client.search_runs(experiments)}


def _store(folder: Path) -> str:
    """The absolute URI of the default store of a command run in ``folder`` (MLflow caches a
    store by its URI, so a relative one would name another test's store in this process)."""
    return f"sqlite:///{folder / 'mlflow.db'}"


def _one_more_command(capsys, monkeypatch, folder: Path) -> str:
    """``dlsched runs repair`` on the store: what any later command does first."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["runs", "repair", "--tracking-uri", _store(folder)]) == 0
    return capsys.readouterr().out


def _evaluation_under_way(
    dlsched_process, folder: Path, scenario_file: Path, policies: str, episodes: int
) -> subprocess.Popen[str]:
    """A ``dlsched evaluate`` process of 20 episodes per policy of ``policies`` in ``folder``,
    once ``episodes`` of them are on disk."""
    process = dlsched_process(
        ["evaluate", "--scenario", scenario_file, "--policy", policies,
         "--episodes", "20", "--no-progress", "--no-plots"],
        cwd=folder,
    )  # fmt: skip
    _wait_for(lambda: _episodes_on_disk(folder) >= episodes, 120, f"{episodes} episodes")
    return process


# ``after`` episodes are on disk, then ``delay_s`` later the signal: mid-episode or between two.
POINTS = [(1, 0.0), (1, 0.15), (2, 0.02)]


@pytest.mark.parametrize(
    ("signum", "point"),
    [
        (signal.SIGINT, POINTS[0]),
        (signal.SIGTERM, POINTS[1]),
        (signal.SIGTERM, POINTS[2]),
    ],
    ids=["SIGINT", "SIGTERM", "SIGTERM-later"],
)
def test_a_stopped_evaluation_ends_every_run_and_says_so(
    capsys, monkeypatch, tmp_path, scenario_file, dlsched_process, new_sqlite_store, signum, point
):
    after, delay_s = point
    new_sqlite_store(tmp_path)
    process = _evaluation_under_way(
        dlsched_process, tmp_path, scenario_file, "default,dqoes", after
    )
    time.sleep(delay_s)
    process.send_signal(signum)
    code = process.wait(timeout=60)
    err = process.communicate()[1]

    name = signal.Signals(signum).name
    assert code == 128 + signum, err
    assert f"dlsched evaluate: interrupted ({name})" in err
    assert "Traceback" not in err
    statuses = _statuses(_store(tmp_path))
    assert "RUNNING" not in statuses.values(), statuses
    assert sorted(set(statuses.values())) in (["FINISHED", "KILLED"], ["KILLED"])
    assert "marked 0 runs KILLED" in _one_more_command(capsys, monkeypatch, tmp_path)


def _finished_episode_runs(uri: str) -> set[str]:
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    query = "tags.`dlsched.kind` = 'episode' and attributes.status = 'FINISHED'"
    return {run.info.run_name for run in client.search_runs(experiments, query)}


@pytest.mark.parametrize("plots", ["--no-plots", "--episode-plots"])
def test_ctrl_c_in_a_terminal_stops_the_evaluation_and_its_writer_with_every_episode_logged(
    tmp_path, scenario_file, default_sigint, new_sqlite_store, plots
):
    """A terminal's Ctrl-C signals the whole process group: the evaluation and the child that
    logs its episodes. The writer ignores it and logs every episode handed over (without the
    plots it had not drawn yet) before the evaluation ends its run."""
    environment = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    new_sqlite_store(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "dlsched.runs.cli", "evaluate", "--scenario", str(scenario_file),
         "--policy", "default,dqoes", "--episodes", "20", "--no-progress", plots],
        cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, process_group=0, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        _wait_for(lambda: _episodes_on_disk(tmp_path) >= 3, 120, "3 episodes")
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    err = process.communicate()[1]

    assert code == 130 and "dlsched evaluate: interrupted (SIGINT)" in err, err
    assert "Traceback" not in err
    with pytest.raises(ProcessLookupError):  # the writer has ended too
        os.killpg(process.pid, 0)
    statuses = _statuses(_store(tmp_path))
    assert "RUNNING" not in statuses.values(), statuses
    on_disk = {path.parent.name for path in tmp_path.glob("dlsched-runs/*/*/episode.json")}
    assert _finished_episode_runs(_store(tmp_path)) == on_disk  # nothing lost


def test_a_killed_evaluation_is_repaired_by_the_next_command(
    capsys, monkeypatch, tmp_path, scenario_file, dlsched_process, new_sqlite_store
):
    new_sqlite_store(tmp_path)
    process = _evaluation_under_way(dlsched_process, tmp_path, scenario_file, "default", 1)
    process.kill()
    process.wait(timeout=30)
    uri = _store(tmp_path)
    # SIGKILL: nobody could end the parent, nor the episode's child if one was running.
    orphans = list(_statuses(uri).values()).count("RUNNING")
    assert orphans in (1, 2)

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # any later command on the store (compare finds no finished evaluation: exit 1)
    assert main(["compare", "--no-plot", "--tracking-uri", _store(tmp_path)]) in (0, 2)
    err = capsys.readouterr().err
    plural = "s" if orphans > 1 else ""
    assert f"tracking: marked {orphans} run{plural} KILLED whose process had died" in err
    statuses = _statuses(uri)
    assert "RUNNING" not in statuses.values()
    assert list(statuses.values()).count("KILLED") == orphans
    assert "marked 0 runs KILLED" in _one_more_command(capsys, monkeypatch, tmp_path)


def test_runs_of_a_live_process_are_never_repaired(capsys, monkeypatch, tmp_path, new_sqlite_store):
    new_sqlite_store(tmp_path)
    uri = _store(tmp_path)
    client = MlflowClient(uri)
    from dlsched.runs.tracking.owners import owner_tags

    experiment = client.create_experiment("live")
    live = client.create_run(experiment, run_name="live", tags=owner_tags()).info.run_id
    assert "marked 0 runs KILLED" in _one_more_command(capsys, monkeypatch, tmp_path)
    assert client.get_run(live).info.status == "RUNNING"
    client.set_terminated(live)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_training_keeps_and_logs_its_work(
    monkeypatch, tmp_path, dlsched_process, new_sqlite_store, signum
):
    new_sqlite_store(tmp_path)
    process = dlsched_process(
        ["train", "--scenario", "dqoes-resnet50-burst-target20", "--timesteps", "1000000",
         "--n-envs", "2", "--eval-every", "256", "--eval-episodes", "1", "--no-progress",
         "--hp", "n_steps=64", "--hp", "batch_size=64", "--patience", "0"],
        cwd=tmp_path,
    )  # fmt: skip
    _wait_for(
        lambda: any(tmp_path.glob("dlsched-runs/*/model/model.zip")), 180, "the first best model"
    )
    process.send_signal(signum)
    code = process.wait(timeout=120)
    out, err = process.communicate()

    assert code == 128 + signum, err
    assert f"interrupted ({signal.Signals(signum).name}); its work is saved" in out
    model_uri = next(line for line in out.splitlines() if line.startswith("model: "))[7:]
    final_uri = next(line for line in out.splitlines() if line.startswith("latest weights: "))
    final_uri = final_uri.removeprefix("latest weights: ")
    assert model_uri.endswith("/model") and final_uri.endswith("/final-model")
    uri = _store(tmp_path)
    client = MlflowClient(uri)
    run = client.get_run(model_uri.split("/")[1])
    assert run.info.status == "KILLED"
    artifacts = {info.path for info in client.list_artifacts(run.info.run_id)}
    assert {"model", "final-model", "validation.json", "progress.csv"} <= artifacts
    monkeypatch.chdir(tmp_path)
    for spec in (model_uri, final_uri):
        policy = resolve_policy(spec, tracking_uri=uri)
        assert policy.name.startswith("ppo")


@pytest.fixture
def sigint_heard():
    """SIGINT's default action in this process for the test, as in a terminal.

    Under ``pytest ... &`` in a script the process ignores SIGINT, and ``interruptible`` rightly
    keeps an ignored signal ignored.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_repeated_signals_never_cut_the_cleanup_short(sigint_heard):
    """The first signal interrupts; the next ones only say that cleanup is in progress."""
    said: list[str] = []
    cleaned = False
    with pytest.raises(Interrupted) as raised, interruptible(said.append):
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            for _ in range(4):  # five signals in all, during the cleanup
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.005)
            cleaned = True
    assert cleaned and raised.value.exit_code == 143
    assert len(said) == 4 and all("cleanup in progress" in text for text in said)


def test_a_signal_during_a_deferred_write_interrupts_when_the_write_is_done():
    events: list[str] = []
    with pytest.raises(Interrupted) as raised, interruptible(events.append):
        with deferred():
            signal.raise_signal(signal.SIGTERM)
            events.append("the write ended")
        events.append("after the write")  # not reached: the signal interrupts here
    assert events == ["the write ended"] and raised.value.exit_code == 143


def _stop_in_a_weakref_callback(signum: int) -> None:
    """Raise ``signum`` where Python cannot raise what its handler raises: in the callback of
    a weak reference, as SQLAlchemy's ``_collection_gced`` is called when the garbage
    collector frees the store's objects."""

    class Collected:
        pass

    referent = Collected()
    reference = weakref.ref(referent, lambda _: signal.raise_signal(signum))
    del referent  # the callback runs here, and Python drops what it raises
    assert reference() is None


def test_a_stop_python_dropped_is_raised_at_the_next_safe_point_without_a_word(capfd):
    events: list[str] = []
    with pytest.raises(Interrupted) as raised, interruptible(events.append):
        _stop_in_a_weakref_callback(signal.SIGTERM)
        events.append("went on")  # nothing could stop it there
        with deferred():  # the end of the next write is a safe point
            events.append("the write ended")
        events.append("after the write")  # not reached
    assert events == ["went on", "the write ended"] and raised.value.exit_code == 143
    assert capfd.readouterr().err == ""  # no "Exception ignored in ...", no traceback


def test_the_next_signal_after_a_dropped_stop_interrupts_at_once():
    events: list[str] = []
    with pytest.raises(Interrupted) as raised, interruptible(events.append):
        _stop_in_a_weakref_callback(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # the user presses again: no "cleanup in progress"
        events.append("not reached")
    assert events == [] and raised.value.exit_code == 143


def test_a_command_whose_stop_was_dropped_ends_its_work_and_exits_130(
    capsys, monkeypatch, sigint_heard
):
    """The stop lands where Python drops it and no safe point follows: the command does its
    work, then says it was stopped, in one line, and exits 130."""
    from dlsched.runs.commands import scenarios

    listed = scenarios.run

    def interrupted_then_listed(args):
        _stop_in_a_weakref_callback(signal.SIGINT)
        return listed(args)

    monkeypatch.setattr(scenarios, "run", interrupted_then_listed)
    assert main(["scenarios"]) == 130
    out, err = capsys.readouterr()
    assert "dqoes-varied-burst" in out  # the work was done
    said = "dlsched scenarios: interrupted (SIGINT) as it ended: its work was done, and is kept"
    assert err == said + "\n"


def test_a_stop_while_the_command_loads_is_one_line(capsys, monkeypatch, sigint_heard):
    """Loading a command (MLflow, torch) takes seconds: a Ctrl-C then is said in one line and
    exits 130, not with the traceback of an import."""
    from dlsched.runs import cli

    build = cli.build_parser

    def build_interrupted(argv):
        signal.raise_signal(signal.SIGINT)
        return build(argv)

    monkeypatch.setattr(cli, "build_parser", build_interrupted)
    try:
        code = main(["scenarios"])
    except KeyboardInterrupt:
        pytest.fail("the stop escaped the command line as a KeyboardInterrupt")
    assert code == 130
    assert capsys.readouterr().err == "dlsched scenarios: interrupted (SIGINT) before it started\n"


def test_a_stop_dropped_in_an_episode_ends_it_at_the_next_step():
    """A Docker episode lasts minutes: a stop Python dropped in it ends it at the next step,
    not once the evaluation is over."""
    from dlsched.runs.evaluation import run_episode

    steps: list[int] = []

    def on_step(record) -> None:
        steps.append(record.step)
        if len(steps) == 3:
            _stop_in_a_weakref_callback(signal.SIGTERM)

    scenario = dataclasses.replace(load_scenario("dqoes-varied-burst"), horizon_s=EPISODE_S)
    with pytest.raises(Interrupted), interruptible(lambda _: None):
        run_episode(scenario, resolve_policy("default"), seed=0, on_step=on_step)
    assert steps == [1, 2, 3]
