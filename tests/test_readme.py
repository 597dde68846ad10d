"""The README's Python example runs as printed and teaches what it says; CI sets up as it says."""

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
    learned = "pretrained:ppo-inference"
    assert set(fractions) == {"default", "dqoes", learned}, text
    assert float(fractions["dqoes"]) > float(fractions["default"])  # it teaches a difference
    assert float(fractions[learned]) > float(fractions["dqoes"])  # and a learned scheduler
    assert "latency / target" in text and "satisfied " in text  # the rendered last step


def test_the_readme_is_an_entry_point_whose_links_all_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200  # a newcomer's five minutes; the detail is in docs/
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert "docs/limits.md" in links and "docs/tracking.md" in links
    missing = [link for link in links if not (README.parent / link).exists()]
    assert not missing, missing


def test_every_doc_link_resolves() -> None:
    missing = []
    for doc in sorted((README.parent / "docs").glob("*.md")):
        for link in re.findall(r"\]\(([^)#:]+)\)", doc.read_text(encoding="utf-8")):
            if not (doc.parent / link).exists():
                missing.append(f"{doc.name}: {link}")
    assert not missing, missing


def test_ci_installs_dlsched_with_the_readme_s_setup_commands() -> None:
    section = README.read_text(encoding="utf-8").split("## Set up", 1)[1]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)[:1]
    printed = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    (body,) = re.findall(r"^install_project\(\) \{\n(.*?)^\}", ci, re.DOTALL | re.MULTILINE)
    run = [line.strip().replace('"$PYTHON" -m pip', "pip") for line in body.splitlines()]
    assert printed == run == ["pip install torch==2.13.0", 'pip install -e ".[all,test]"']
