"""The shape of the code, held by tests: import contracts, no import circles (lazy imports
count), short modules, a small top of ``leasing/``, and work sent to Celery only by names
that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "inventory", "leasing")
LONGEST = 520  # "about 500 lines"; a longer module's docstring says why (and how long)


def _modules() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    ]


def test_the_import_contracts_hold(capsys):
    """The contracts in pyproject.toml (layers, forbidden imports, protected task modules,
    acyclic siblings); .ci/run runs ``lint-imports`` too, with its full report."""
    from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    assert status == EXIT_STATUS_SUCCESS, capsys.readouterr().out[-3000:]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_the_projects_modules():
    """Every import counts, also those inside functions (grimp reads them all); a package's
    ``__init__`` counts as the package."""
    built = grimp.build_graph(*PACKAGES, cache_dir=None)
    graph = {
        module: {
            imported
            for imported in built.find_modules_directly_imported_by(module)
            if imported.split(".")[0] in PACKAGES and ".migrations" not in imported
        }
        for module in built.modules
        if ".migrations" not in module
    }
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_modules_are_short_or_say_why():
    long = []
    for path in _modules():
        lines = path.read_text().count("\n")
        if lines <= LONGEST:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if not re.search(r"\b\d[\d,]* lines\b", docstring):
            long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert long == [], "split these, or say in the docstring why they are long"


def test_the_top_of_leasing_stays_small():
    top = sorted(p.name for p in (ROOT / "leasing").glob("*.py"))
    assert len(top) <= 12, top


def _enqueued_names() -> set[str]:
    """Every task name the code sends (``enqueue("…")``, ``enqueue_after_commit("…")``)."""
    names = set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None))
                in {"enqueue", "enqueue_after_commit"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(node.args[0].value)
    return names


def test_every_task_sent_or_scheduled_by_name_exists():
    from leasing.enqueue import task_named

    sent = _enqueued_names()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "leasing.tasks.provision_lease" in sent and "leasing.tasks.tick" in scheduled
    for name in sorted(sent | scheduled):
        assert task_named(name).name == name


@pytest.mark.parametrize(
    "package",
    ["leasing.lifecycle.tasks", "leasing.notify.tasks", "leasing.billing.tasks", "inventory.tasks"],
)
def test_task_names_are_pinned(package):
    """Names survive a move: each task says its name instead of taking its module's."""
    tree = ast.parse((ROOT / (package.replace(".", "/") + ".py")).read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            decorator = node.decorator_list[0]
            assert isinstance(decorator, ast.Call), node.name
            assert any(k.arg == "name" for k in decorator.keywords), node.name
