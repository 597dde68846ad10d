"""The core and its extras: ``import dlsched.envs`` (and the baselines, the policy interface)
loads no extra's package, the core runs with every extra's package absent, a part used without
its extra names the extra to install, and :data:`~dlsched.envs.extras.EXTRAS` says what
``pyproject.toml`` installs.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import pytest
from packaging.requirements import Requirement
from repo_paths import REPOSITORY

import dlsched.runs
from dlsched.envs.errors import MissingExtraError
from dlsched.envs.extras import EXTRAS
from dlsched.runs.cli import main
from dlsched.runs.policy_specs import resolve_policy

#: Every package of every extra, by import name.
EXTRA_PACKAGES: tuple[str, ...] = tuple(
    sorted({name for names in EXTRAS.values() for name in names})
)
SMOKE_SCRIPT = REPOSITORY / "scripts" / "core_smoke.py"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by this Python in a process of its own (a fresh ``sys.modules``)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )


def hiding_extras() -> str:
    """Python that makes every extra's package unimportable, as in a core install: an import
    of a name whose ``sys.modules`` entry is ``None`` raises ``ModuleNotFoundError``."""
    return f"import sys\nfor name in {EXTRA_PACKAGES!r}:\n    sys.modules[name] = None\n"


def test_the_core_imports_no_package_of_an_extra() -> None:
    result = run_python(
        "import sys\n"
        "import gymnasium as gym\n"
        "import dlsched.envs, dlsched.baselines, dlsched.policies, dlsched.runs\n"
        "from dlsched.runs import resolve_policy\n"
        "env = gym.make('dlsched/Inference-v0', scenario='dqoes-varied-burst')\n"
        "env.reset(seed=0)\n"
        "env.step(env.action_space.sample())\n"
        "resolve_policy('dqoes')\n"
        f"print(sorted(name for name in {EXTRA_PACKAGES!r} if name in sys.modules))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_core_smoke_script_passes_with_every_extra_absent() -> None:
    result = run_python(
        hiding_extras() + "import runpy\n"
        f"sys.argv = ['core_smoke.py', 'dqoes-resnet50-burst-target20', 'docker-smoke-training']\n"
        f"runpy.run_path({str(SMOKE_SCRIPT)!r}, run_name='__main__')\n"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("dqoes-resnet50-burst-target20") and "dqoes" in lines[0]
    assert lines[1].startswith("docker-smoke-training") and "flowcon" in lines[1]
    assert lines[-1].startswith("2 scenarios: check_env and a baseline's episode each")


def test_the_smoke_script_fails_on_an_unknown_scenario() -> None:
    result = run_python(
        "import runpy, sys\n"
        "sys.argv = ['core_smoke.py', 'no-such-scenario']\n"
        f"runpy.run_path({str(SMOKE_SCRIPT)!r}, run_name='__main__')\n"
    )
    assert result.returncode == 1
    assert "no-such-scenario: FAILED: UnknownNameError" in result.stderr


def _docker_backend() -> object:
    return gym.make("dlsched/Inference-v0", scenario="docker-inference-3", backend="docker")


def _rgb_frames() -> object:
    return gym.make("dlsched/Inference-v0", render_mode="rgb_array")


def _shipped_model() -> object:
    return resolve_policy("pretrained:ppo-inference")


def _model_file() -> object:
    return resolve_policy("trained/model.zip")


def _lab_function() -> object:
    return dlsched.runs.evaluate


@pytest.mark.parametrize(
    ("hidden", "use", "extra"),
    [
        ("docker", _docker_backend, "docker"),
        ("psutil", _docker_backend, "docker"),
        ("matplotlib", _rgb_frames, "render"),
        ("torch", _shipped_model, "train"),
        ("stable_baselines3", _model_file, "train"),
        ("tqdm", _lab_function, "lab"),
    ],
)
def test_a_part_used_without_its_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, hidden: str, use: Callable[[], object], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # what an install without the extra imports
    with pytest.raises(MissingExtraError) as caught:
        use()
    message = str(caught.value)
    assert f'pip install "dlsched[{extra}]"' in message
    assert f"{hidden} is not installed" in message
    assert "\n" not in message


def test_a_lab_command_without_the_lab_extra_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "scipy", None)
    assert main(["compare"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "dlsched compare: error: this command needs the lab extra, and mlflow, scipy are not "
        'installed: pip install "dlsched[lab]" (from a checkout: pip install -e ".[lab]")\n'
    )
    assert not list(tmp_path.iterdir())  # refused before the command's log file


def test_the_scenarios_command_needs_no_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # its log file
    for name in EXTRA_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["scenarios"]) == 0
    assert "dqoes-varied-burst" in capsys.readouterr().out


def _distributions(requirements: list[str], extras: dict[str, list[str]]) -> set[str]:
    """The distributions ``requirements`` name, dlsched's own extras expanded."""
    names: set[str] = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name == "dlsched":
            for extra in requirement.extras:
                names |= _distributions(extras[extra], extras)
        else:
            names.add(_canonical(requirement.name))
    return names


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_extras_table_names_what_pyproject_installs() -> None:
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    installed_by = importlib.metadata.packages_distributions()
    assert set(extras) - {"all", "test"} == set(EXTRAS)
    for extra, packages in EXTRAS.items():
        named = _distributions(extras[extra], extras)
        providers = {name: {_canonical(dist) for dist in installed_by[name]} for name in packages}
        # each package imported comes with a distribution the extra names (mlflow's import name
        # has three: mlflow, mlflow-skinny, mlflow-tracing), and each one named is imported
        assert all(providers[name] & named for name in packages), (extra, providers, named)
        assert named <= set().union(*providers.values()), (extra, providers, named)
    assert _distributions(extras["all"], extras) == _distributions(
        extras["lab"] + extras["ray"], extras
    )
