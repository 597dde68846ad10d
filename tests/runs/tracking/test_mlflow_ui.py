"""What a person sees of an evaluation in ``mlflow ui``: headless Chromium on a real server.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``), with
nothing to install beyond the browser. Screenshots go to ``tmp_path``, or to
``DLSCHED_SCREENSHOT_DIR`` when it is set (how ``docs/images/mlflow-evaluation.png`` is made).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium on PATH"),
]

SCENARIO = "dqoes-resnet50-burst-target40"
WAIT_S = 240.0  # mlflow ui's first page on a busy two-core machine


def _onto_3_and_4(commands: int, replies: int) -> None:
    """In the child: the DevTools pipe on the fds Chromium reads (3) and writes (4)."""
    commands, replies = os.dup(commands), os.dup(replies)  # neither is 3 or 4 any more
    os.dup2(commands, 3)
    os.dup2(replies, 4)


class Chromium:
    """One headless Chromium page, driven over the DevTools protocol on a pipe."""

    def __init__(self, profile: Path, width: int = 1600, height: int = 1000) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        self.process = subprocess.Popen(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "--no-first-run",
                "--disable-background-networking",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            close_fds=False,  # fds 3 and 4 are the pipe (dup2'd in the child)
            preexec_fn=lambda: _onto_3_and_4(commands_read, replies_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._last_id = 0
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self._call("Page.enable", page=True)
        self._call(
            "Emulation.setDeviceMetricsOverride",
            page=True, width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip

    def _call(self, method: str, page: bool = False, **params: object) -> dict:
        self._last_id += 1
        message: dict[str, object] = {"id": self._last_id, "method": method, "params": params}
        if page:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._replies, 1 << 16)
                assert chunk, "chromium closed its DevTools pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._last_id:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    def goto(self, url: str) -> None:
        self._call("Page.navigate", page=True, url=url)

    def js(self, expression: str) -> object:
        reply = self._call("Runtime.evaluate", page=True, expression=expression, returnByValue=True)
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = WAIT_S) -> object:
        """Poll ``expression`` until it is truthy; the page's own progress is the clock."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if value := self.js(expression):
                return value
            time.sleep(0.2)
        raise AssertionError(f"not true within {timeout_s} s: {expression}")

    def click(self, selector_js: str) -> None:
        assert self.js(f"(() => {{ const e = {selector_js}; if (!e) return false; e.click(); "
                       "return true; })()"), selector_js  # fmt: skip

    def screenshot(self, path: Path) -> Path:
        data = self._call("Page.captureScreenshot", page=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self._commands)
        os.close(self._replies)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mlflow_ui(tmp_path):
    """``start(uri) -> base URL`` of ``mlflow ui`` on loopback, stopped (its group) at the end."""
    servers: list[subprocess.Popen] = []

    def start(uri: str) -> str:
        port = _free_port()
        log = tmp_path / f"mlflow-ui-{port}.log"
        with log.open("w") as out:
            server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mlflow",
                    "ui",
                    "--backend-store-uri",
                    uri,
                    "--port",
                    str(port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                start_new_session=True,
            )
        servers.append(server)
        deadline = time.monotonic() + WAIT_S
        while "Uvicorn running" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        return f"http://127.0.0.1:{port}/"

    yield start
    for server in servers:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


@pytest.fixture
def browser(tmp_path):
    chromium = Chromium(tmp_path / "chromium-profile")
    yield chromium
    chromium.close()


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DLSCHED_SCREENSHOT_DIR", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _link(text: str) -> str:
    return f"[...document.querySelectorAll('a')].find(a => a.innerText.trim() === {text!r})"


def _images_loaded(names: tuple[str, ...]) -> str:
    checks = " && ".join(
        f"[...document.images].some(i => i.src.includes('path={name}') && i.naturalWidth > 0)"
        for name in names
    )
    return f"({checks})"


#: The page's text, as a script reads it.
_TEXT = "document.body.innerText"


#: A table row of the note's code block: a value, two spaces at least, the next value.
_SPACED_CELLS = r"\d ± \d+\.\d+ {2,}\*?\d"


def test_an_evaluation_shows_its_headlines_and_charts_one_click_from_the_experiments(
    capsys, monkeypatch, tmp_path, mlflow_ui, browser
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    scenario = dataclasses.replace(load_scenario(SCENARIO), horizon_s=120.0)
    (tmp_path / "scenario.yaml").write_text(dump_scenario(scenario))
    code = main(
        [
            "evaluate",
            "--no-progress",
            "--scenario",
            "scenario.yaml",
            "--json",
            "--policy",
            "default,dqoes,equal",
            "--episodes",
            "3",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    location = json.loads(out)["evaluation"]
    base = mlflow_ui(f"sqlite:///{tmp_path / 'mlflow.db'}")
    shots = _shots(tmp_path)

    browser.goto(base + "#/experiments")
    browser.wait_for(f"!!{_link(scenario.name)}")
    # the experiments list: the description's first 40 characters carry the scores
    description = browser.js(
        f"{_link(scenario.name)}.closest('[role=row], tr').innerText.split('\\n')"
        ".find(t => t.includes(': satisfied fraction'))"
    )
    assert re.match(r"(dqoes|default|equal) \d\.\d{3}, (dqoes|default|equal) \d\.\d{3}, ",
                    description[:40]), description  # fmt: skip
    # MLflow 3.17 opens an experiment in the view of the browser's switch (GenAI until a
    # person picks "Model training" once; the experiment's kind tag no longer decides)
    browser.click(
        "[...document.querySelectorAll('div[role=button],span')]"
        ".filter(e => e.innerText && e.innerText.trim() === 'Model training').pop()"
    )
    browser.click(_link(scenario.name))
    browser.wait_for("location.hash.includes('/runs')")
    # the episodes are listed under their evaluation, its row open without a click
    browser.wait_for(f"{_TEXT}.includes('dqoes-seed2') && {_TEXT}.includes('equal-seed0')")
    # the experiment's note, above the runs: the newest evaluation's headline per policy
    browser.wait_for(f"{_TEXT}.includes(': satisfied fraction')")
    browser.click(
        "document.querySelector('[data-component-id=\"mlflow.assistant.chat_panel.close\"]')"
    )
    browser.click(
        "document.querySelector('[data-component-id=\"mlflow.experiment.metadata_editor.expand_button\"]')"
    )
    browser.wait_for(_images_loaded(("policies.png", "timeline.png")))
    # the table of every metric reads: its cells keep their spaces (a code block)
    table = browser.js(
        "[...document.querySelectorAll('pre')].map(p => p.innerText)"
        ".find(t => t.includes('|B| end'))"
    )
    assert re.search(_SPACED_CELLS, table), table
    assert "|G| end: services faster than needed" in table  # the legend
    spacing = browser.js(
        "getComputedStyle([...document.querySelectorAll('pre')].find(p => "
        "p.innerText.includes('|B| end'))).whiteSpace"
    )
    assert spacing.startswith("pre"), spacing
    browser.screenshot(shots / "mlflow-evaluation.png")

    # one link shows the evaluation's runs, flat, each policy's headline beside them, with no
    # column picked (MLflow opens a note's links in a new tab: this page loads it afresh)
    link = browser.js(
        "[...document.querySelectorAll('a')].find(a => a.innerText.startsWith('Its episodes'))"
        ".getAttribute('href')"
    )
    assert link.startswith("#/") and "viewStateShareKey=" in link, link
    browser.goto("about:blank")
    browser.goto(base + link)
    for label in ("default", "dqoes", "equal"):
        browser.wait_for(f"{_TEXT}.includes('{label} satisfied fraction')")
    browser.wait_for(f"{_TEXT}.includes('dqoes-seed2')")
    browser.screenshot(shots / "mlflow-runs-scores.png")

    browser.goto(
        base + f"#/experiments/{location['experiment_id']}/runs/{location['parent_run_id']}"
    )
    # the run's own page: its headlines with their intervals first, above the fold
    browser.wait_for(f"{_TEXT}.includes({location['id']!r})")
    first = browser.js(f"{_TEXT}.split('\\n').find(line => line.includes({location['id']!r}))")
    assert re.match(r"(dqoes|default|equal) \d\.\d{3} (±|\[)", first), first
    browser.wait_for(_images_loaded(("policies.png", "timeline.png")))
    browser.screenshot(shots / "mlflow-evaluation-run.png")
