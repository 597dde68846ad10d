"""Training on Ray RLlib (``dlsched train --engine rllib``): a short PPO training on a Ray started
on loopback, tracked in MLflow, whose model ``dlsched evaluate`` loads and runs.

The tests that train need the ``ray`` extra; they skip without it, and fail instead when
``DLSCHED_REQUIRE_RAY=1`` (CI, which installs the extra). The rest run everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from mlflow import MlflowClient

from dlsched.envs.errors import MissingExtraError
from dlsched.policies.learned import CARD_FILE, MODEL_FILE, LearnedPolicy
from dlsched.runs.cli import main
from dlsched.runs.policy_specs import resolve_policy
from dlsched.runs.training.harness import BEST_MODEL_DIR, CONFIG_FILE, PROGRESS_FILE
from dlsched.runs.training.rllib import (
    CHECKPOINT_DIR,
    LOOPBACK_SWITCH,
    RllibConfig,
    require_ray,
    train_rllib,
)


def _need_ray() -> None:
    """Skip without the ray extra; fail instead when DLSCHED_REQUIRE_RAY=1 (CI installs it)."""
    try:
        require_ray()
    except MissingExtraError as error:
        if os.environ.get("DLSCHED_REQUIRE_RAY", "") == "1":
            pytest.fail(f"DLSCHED_REQUIRE_RAY=1 but {error}")
        pytest.skip(str(error))


#: A small inference scenario: six 10 s steps per episode, four services on one 8-core worker
#: (written to a file by the ``scenario_file`` fixture: a scenario by path travels with the job).
SHORT_SCENARIO = """\
name: rllib-short
kind: inference
interval_s: 10
horizon_s: 60
slots_per_worker: 4
workers: {count: 1, cores: 8}
jobs:
  - {workload: resnet50, count: 2, arrival: {kind: burst}, targets_s: [20]}
  - {workload: vgg16, count: 2, arrival: {kind: fixed, every_s: 15}, targets_s: [40]}
"""
SCENARIO = str(Path(tempfile.gettempdir()) / f"dlsched-rllib-{uuid.uuid4().hex[:8]}.yaml")
#: Two PPO iterations of 128 steps each: 4 episodes side by side, several ending in each, in
#: one env runner: a Ray actor in its own process, as on a cluster.
TRAIN_ARGS = [
    "train", "--engine", "rllib", "--scenario", SCENARIO, "--timesteps", "256",
    "--n-envs", "4", "--net-arch", "16", "--env-runners", "1", "--num-cpus", "2",
    "--hp", "train_batch_size_per_learner=128", "--hp", "minibatch_size=64",
    "--hp", "num_epochs=2",
]  # fmt: skip


def _ray_processes(root: Path) -> list[str]:
    """The processes whose command line names ``root`` (a Ray session's files live there)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if str(root) in cmdline:
            found.append(f"{process.info['pid']}: {cmdline[:120]}")
    return found


@pytest.fixture(scope="module", autouse=True)
def scenario_file() -> Iterator[Path]:
    path = Path(SCENARIO)
    path.write_text(SHORT_SCENARIO, encoding="utf-8")
    yield path
    path.unlink()


@pytest.fixture(scope="module")
def ray_root() -> Iterator[Path]:
    """A fresh, short RAY_TMPDIR (Ray's sockets must fit a Unix path); after the module, no
    process of the Ray sessions in it may be left, and it is removed."""
    with pytest.MonkeyPatch.context() as patch:
        # as the CLI does before it first imports Ray for a local instance (require_ray)
        patch.setenv(LOOPBACK_SWITCH, "0")
        _need_ray()
        root = Path(tempfile.mkdtemp(prefix="dlsched-ray-"))
        patch.setenv("RAY_TMPDIR", str(root))
        yield root
    import ray

    ray.shutdown()  # a no-op unless a test failed inside a session
    left = _ray_processes(root)
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"Ray processes left behind: {left}"


@pytest.fixture(scope="module")
def trained(
    ray_root: Path, mlflow_store: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str, Path]:
    """One ``dlsched train --engine rllib`` run: ``(stdout, run id, tracking uri, ray root)``."""
    folder, uri = mlflow_store
    out = tmp_path_factory.mktemp("rllib-out")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # the store's artifacts live beside it
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        code = main([
            *TRAIN_ARGS, "--tracking-uri", uri, "--out", str(out),
            "--experiment", f"rllib-test-{uuid.uuid4().hex[:8]}",
        ])  # fmt: skip
    assert code == 0
    runs = MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()],
        filter_string="params.engine = 'rllib'",
        order_by=["start_time DESC"],
        max_results=1,
    )
    return str(out), runs[0].info.run_id, uri, ray_root


def test_an_rllib_training_is_tracked_like_an_sb3_one(trained: tuple[str, str, str, Path]) -> None:
    _, run_id, uri, _ = trained
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["dlsched.kind"] == "training"
    params = run.data.params
    assert (params["engine"], params["algo"], params["ray.cluster"]) == ("rllib", "ppo", "local")
    assert params["env_runners"] == "1"
    assert params["hp.train_batch_size_per_learner"] == "128"
    assert params["net_arch"] == "16"
    # one point per training iteration, at the environment steps sampled so far
    history = client.get_metric_history(run_id, "time/iterations")
    assert [metric.value for metric in history] == [1.0, 2.0]
    steps = [metric.step for metric in history]
    assert steps[0] >= 128 and steps[1] >= 256 and steps[0] < steps[1]
    losses = client.get_metric_history(run_id, "train/value_loss")
    assert len(losses) == 2 and all(np.isfinite(metric.value) for metric in losses)
    # episodes of six steps ended in both iterations: their return and length are logged (RLlib
    # counts an episode cut by the end of an iteration a step longer: 6.2 in the second)
    lengths = [m.value for m in client.get_metric_history(run_id, "rollout/ep_len_mean")]
    assert len(lengths) == 2 and all(6 <= length < 7 for length in lengths), lengths
    assert len(client.get_metric_history(run_id, "rollout/ep_rew_mean")) == 2
    top = {artifact.path for artifact in client.list_artifacts(run_id)}
    assert {BEST_MODEL_DIR, CHECKPOINT_DIR, CONFIG_FILE, PROGRESS_FILE, "scenarios"} <= top
    inner = {
        Path(a.path).name
        for a in client.list_artifacts(run_id, f"{BEST_MODEL_DIR}/artifacts/policy")
    }
    assert {MODEL_FILE, CARD_FILE} <= inner
    config = json.loads(Path(client.download_artifacts(run_id, CONFIG_FILE)).read_text())
    assert config["engine"] == "rllib" and config["ray_version"]


def test_the_rllib_model_is_evaluated_by_dlsched_evaluate(
    trained: tuple[str, str, str, Path], evaluated_labels: Callable[..., list[str]]
) -> None:
    _, run_id, uri, _ = trained
    policy = resolve_policy(f"runs:/{run_id}/model", tracking_uri=uri)
    assert isinstance(policy, LearnedPolicy)
    assert policy.card.actions.mode.value == "absolute"
    labels = evaluated_labels(SCENARIO, f"runs:/{run_id}/model", uri)
    assert labels == [f"ppo-{run_id[:8]}"]


def test_the_exported_policy_acts_as_rllib_does(trained: tuple[str, str, str, Path]) -> None:
    """The exported SB3 network and RLlib's restored checkpoint set the same limits."""
    import gymnasium as gym
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module import RLModule

    from dlsched.envs.scenarios.file_format import load_scenario

    _, run_id, uri, _ = trained
    client = MlflowClient(uri)
    checkpoint = Path(client.download_artifacts(run_id, CHECKPOINT_DIR))
    module = RLModule.from_checkpoint(
        checkpoint / "learner_group" / "learner" / "rl_module" / "default_policy"
    )
    policy = resolve_policy(f"runs:/{run_id}/model", tracking_uri=uri)
    env = gym.make("dlsched/Inference-v0", scenario=load_scenario(SCENARIO), render_mode=None)
    observation, _ = env.reset(seed=7)
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.as_tensor(observation.reshape(1, -1))})
    mean = out[Columns.ACTION_DIST_INPUTS][0, : observation.shape[0]].numpy()
    # RLlib's normalize_actions: [-1, 1] onto the Box(0, 1) limits, clipped
    expected = np.clip((np.clip(mean, -1, 1) + 1) / 2, 0, 1)
    limits, _ = policy.predict(observation)
    np.testing.assert_allclose(limits, expected, atol=1e-5)


def test_ray_is_started_on_loopback_and_leaves_nothing_running(
    trained: tuple[str, str, str, Path],
) -> None:
    import ray

    _, run_id, uri, root = trained
    assert not ray.is_initialized()
    assert (root / "ray").is_dir()  # the session was this module's, under RAY_TMPDIR
    assert _ray_processes(root) == []
    gcs = MlflowClient(uri).get_run(run_id).data.tags["ray.gcs_address"]
    assert gcs.startswith("127.0.0.1:"), gcs


def test_without_the_extra_the_error_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray imports
    with pytest.raises(MissingExtraError, match=r"dlsched\[ray\]"):
        train_rllib(RllibConfig(scenario=SCENARIO, timesteps=1), tmp_path)
    code = main([*TRAIN_ARGS, "--no-tracking", "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert 'pip install "dlsched[ray]"' in err
    assert not list(tmp_path.iterdir())  # refused before any folder or run


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--frame-stack", "2"], "--frame-stack"),
        (["--algo", "sac"], "--algo"),
        (["--eval-every", "0", "--backend", "docker"], "--eval-every, --backend"),
    ],
)
def test_sb3_options_are_refused_with_engine_rllib(
    extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*TRAIN_ARGS, *extra, "--no-tracking", "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert f"{named} do" in err and "--engine rllib" in err


def test_rllib_options_are_refused_with_engine_sb3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "train", "--scenario", SCENARIO, "--timesteps", "8", "--ray-address", "auto",
        "--no-tracking", "--out", str(tmp_path),
    ])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert "--ray-address does not apply to --engine sb3" in err


def test_engine_rllib_trains_on_one_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code = main([
        *TRAIN_ARGS[:4], f"{SCENARIO},{SCENARIO}", *TRAIN_ARGS[5:], "--no-tracking",
        "--out", str(tmp_path),
    ])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert "one scenario" in err


def test_local_ray_needs_a_cpu_per_env_runner_and_the_driver() -> None:
    from dlsched.envs.errors import PolicyError

    with pytest.raises(PolicyError, match=r"env_runners=2 need 3 CPUs .* num_cpus=2"):
        RllibConfig(scenario=SCENARIO, timesteps=1, env_runners=2, num_cpus=2).check()
