"""The README's Python example runs as printed and teaches what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_example() -> str:
    section = README.read_text(encoding="utf-8").split("## In Python", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)[:1]
    return code


def test_the_python_example_shows_a_scheduler_beat_docker_s_default() -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(python_example(), str(README), "exec"), {"__name__": "readme"})
    text = printed.getvalue()
    fractions = dict(re.findall(r"^([\w:-]+): satisfied fraction (\d\.\d{3})$", text, re.MULTILINE))
    learned = "pretrained:ppo-inference-mix"
    assert set(fractions) == {"default", "dqoes", learned}, text
    assert float(fractions["dqoes"]) > float(fractions["default"])  # it teaches a difference
    assert float(fractions[learned]) > float(fractions["dqoes"])  # and a learned scheduler
    assert "latency / target" in text and "satisfied " in text  # the rendered last step
