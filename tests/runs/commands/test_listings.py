"""What the listing commands print reads as plain text to a newcomer."""

from __future__ import annotations

from dlsched.baselines.registry import names
from dlsched.runs.cli import main


def test_the_baselines_are_listed_in_plain_text_each_with_what_it_does(capsys):
    """Issue 34 item 13: ``1 / n`` in reST markup, and "see the module docstring" for oracle."""
    assert main(["baselines"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "docstring" not in out
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in out.splitlines()
             if ": " in line and not line.startswith(" ")}  # fmt: skip
    assert lines["equal"].startswith("Caps every active container at 1 / n of its worker")
    assert lines["oracle"].startswith("A heuristic that cheats: it plans from the replay")
    assert all(len(lines[name].split()) >= 5 for name in names())
