"""The docs a newcomer reads first say what is true of the tree today."""

from __future__ import annotations

import re
import subprocess
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


def _tracked_top_level() -> set[str]:
    """The top-level entries git tracks (not what an install or a run left: .venv, var,
    cardpool.egg-info); without git, every entry on disk."""
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {p.name for p in ROOT.iterdir() if not p.name.endswith(".egg-info")}
    return {line.split("/")[0] for line in out.splitlines() if line}


def test_every_top_level_entry_is_in_the_readme_table():
    tracked = {p for p in _tracked_top_level() if not p.startswith(".") or p == ".ci"}
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
