"""A model's files are measured before anything reads them: a zip bomb, a zip of many members, a
table of contents larger than its members could need and an oversized card are each refused by
a stated limit that names the variable raising it, before torch or SB3 is imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from repo_paths import LIMITS_DOC, MODEL_V0_1_0_CONVERTED

from dlsched.envs.errors import ModelError
from dlsched.policies.model_files import (
    CARD_FILE,
    MAX_MODEL_BYTES,
    MAX_MODEL_MEMBERS,
    MODEL_FILE,
    model_files,
)

#: Runs ``dlsched ARGS`` in a fresh interpreter; prints its exit code, whether it imported
#: torch, and its peak memory (VmHWM: ``ru_maxrss`` would count the forking test process's).
PROBE = """
import json, re, sys
from pathlib import Path
from dlsched.runs.cli import main
code = main(sys.argv[1:])
peak_kb = int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1])
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "peak_mb": peak_kb / 1024}))
"""


def model_with(tmp_path: Path, members: dict[str, bytes] | None = None) -> Path:
    """A copy of the fixture model folder whose model.zip holds its members and ``members``
    (replacing those of the same name)."""
    folder = tmp_path / "model"
    shutil.copytree(MODEL_V0_1_0_CONVERTED, folder)
    with zipfile.ZipFile(MODEL_V0_1_0_CONVERTED / MODEL_FILE) as source:
        kept = {name: source.read(name) for name in source.namelist()}
    kept.update(members or {})
    with zipfile.ZipFile(folder / MODEL_FILE, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in kept.items():
            archive.writestr(name, data)
    return folder


def zip_bomb(tmp_path: Path, declared: int) -> Path:
    """The fixture model whose ``data`` member unpacks into ``declared`` bytes of zeros (a few
    hundred kilobytes of zip)."""
    folder = model_with(tmp_path)
    with zipfile.ZipFile(MODEL_V0_1_0_CONVERTED / MODEL_FILE) as source:
        kept = {name: source.read(name) for name in source.namelist() if name != "data"}
    chunk = bytes(1 << 24)
    with zipfile.ZipFile(folder / MODEL_FILE, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as bomb:
        with bomb.open("data", "w") as data:
            for _ in range(declared // len(chunk)):
                data.write(chunk)
        for name, content in kept.items():
            bomb.writestr(name, content)
    return folder / MODEL_FILE


def test_a_zip_bomb_is_refused_by_its_declared_size_before_torch_is_imported(tmp_path):
    bomb = zip_bomb(tmp_path, 256 << 20)
    assert bomb.stat().st_size < 2 << 20
    environment = {
        key: value for key, value in os.environ.items() if key != MAX_MODEL_BYTES.variable
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "evaluate", "--scenario", "dqoes-varied-burst",
         "--policy", str(bomb), "--no-tracking", "--no-progress"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=environment,
    )  # fmt: skip
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["code"] == 2 and "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"dlsched evaluate: error: model {str(bomb)!r} would unpack into")
    assert "its member 'data' alone declares 268,435,456" in first
    assert f"at most {MAX_MODEL_BYTES.default:,} bytes" in first
    assert f"{MAX_MODEL_BYTES.variable}=N" in first
    assert not outcome["torch"]  # refused before SB3 and torch are loaded
    assert outcome["peak_mb"] < 500


def test_a_zip_of_too_many_members_is_refused_by_their_count(tmp_path):
    count = MAX_MODEL_MEMBERS.default + 1
    folder = model_with(tmp_path, {f"extra-{index}.pth": b"" for index in range(count)})
    with pytest.raises(ModelError) as refused:
        model_files(folder)
    message = str(refused.value)
    assert f"is a zip of {count + 6:,} members" in message
    assert f"at most {MAX_MODEL_MEMBERS.default} members in a model.zip" in message
    assert f"{MAX_MODEL_MEMBERS.variable}=N" in message


def test_a_table_of_contents_larger_than_its_members_need_is_refused_before_it_is_read(
    tmp_path,
):
    folder = model_with(tmp_path, {f"{'x' * 60_000}-{index}": b"" for index in range(4)})
    with pytest.raises(ModelError, match=r"its table of contents takes 2\d\d,\d\d\d bytes"):
        model_files(folder)


def test_an_oversized_card_beside_the_model_counts_against_the_limit(tmp_path):
    folder = model_with(tmp_path)
    with (folder / CARD_FILE).open("r+b") as card:  # sparse: no disk taken
        card.truncate(MAX_MODEL_BYTES.default + 1)
    with pytest.raises(ModelError, match=f"the file beside it '{CARD_FILE}' alone declares"):
        model_files(folder)


def test_the_limit_is_the_variable_s_value(tmp_path, monkeypatch):
    from dlsched.policies.learned import load_model

    folder = model_with(tmp_path)
    monkeypatch.setenv(MAX_MODEL_BYTES.variable, "1000")
    with pytest.raises(ModelError, match=r"at most 1,000 bytes of a model's files"):
        model_files(folder)
    monkeypatch.setenv(MAX_MODEL_BYTES.variable, "10_000_000")
    assert load_model(folder).card.input_layout.workers >= 1


def test_the_limits_doc_states_the_limits():
    readme = LIMITS_DOC.read_text()
    for limit in (MAX_MODEL_BYTES, MAX_MODEL_MEMBERS):
        assert f"{limit.default:,}" in readme and f"`{limit.variable}`" in readme
