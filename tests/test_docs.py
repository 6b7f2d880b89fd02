"""The docs a newcomer reads first say what is true of the tree today."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
# Top-level entries the README's table need not name (the README itself, tool caches).
UNLISTED = {"README.md", ".git", ".gitignore", ".dockerignore", ".venv", "var", ".hypothesis"}


def readme_paths() -> set[str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| path | what |") :].split("\n\n")[0]
    return {
        p.rstrip("/")
        for row in table.splitlines()[2:]
        for p in re.findall(r"`([^`]+)`", row.split("|")[1])
    }


def test_every_path_in_the_readme_table_exists():
    missing = sorted(p for p in readme_paths() if not (ROOT / p).exists())
    assert missing == []


def test_every_top_level_entry_is_in_the_readme_table():
    tracked = {p.name for p in ROOT.iterdir() if not p.name.startswith(".") or p.name == ".ci"}
    listed = {p.split("/")[0] for p in readme_paths()}
    assert sorted(tracked - listed - UNLISTED - {"shared"}) == []


def test_performance_is_today_s_figures_each_with_its_command():
    text = (ROOT / "docs" / "performance.md").read_text()
    assert len(text.splitlines()) <= 300
    assert not re.search(r"this session|branch \w|revision [0-9a-f]{7}", text)
    sections = text.split("\n## ")[2:]  # after the summary
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")} - {"fault_common.py", "smoke.py"}
    named = set()
    for section in sections:
        assert "```sh" in section, section.splitlines()[0]  # the command to reproduce it
        named |= set(re.findall(r"bench/(\w+\.py)", section.splitlines()[0]))
    assert scripts <= named  # every benchmark has its section
