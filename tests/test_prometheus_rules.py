"""The Prometheus rules shipped for sites that run Prometheus (deploy/prometheus/) mirror the
portal's own pool-health rules: one alert per portal rule, with its default threshold, window
and severity; promtool accepts them and their unit tests pass against recorded series."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from leasing.choices import AlertKind
from leasing.health.rules import DEFAULTS

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = DEPLOY / "cardpool-rules.yml"
# Where the portal's window is part of the expression rather than the rule's `for`.
WINDOW_IN_EXPR = {
    AlertKind.NODE_SILENT: lambda m: f"> {m * 60}",
    AlertKind.FAILURE_RATE: lambda m: "last_hour" if m == 60 else f"[{m}m]",
    AlertKind.CARD_IDLE: lambda m: "[1h]" if m == 60 else f"[{m}m]",
}


def shipped() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    return {rule["labels"]["cardpool_rule"]: rule for rule in rules}


def test_every_portal_rule_has_a_prometheus_counterpart():
    rules = shipped()
    assert set(rules) == set(AlertKind.values)


@pytest.mark.parametrize("kind", AlertKind.values)
def test_the_counterpart_has_the_portals_defaults(kind):
    rule, default = shipped()[kind], DEFAULTS[kind]
    assert rule["labels"]["severity"] == default.severity
    if kind in WINDOW_IN_EXPR:
        assert WINDOW_IN_EXPR[kind](default.for_minutes) in rule["expr"]
    else:
        assert rule["for"] == f"{default.for_minutes}m"
    if kind not in (AlertKind.NODE_SILENT,):
        threshold = default.threshold
        numbers = {float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", rule["expr"])}
        assert threshold in numbers or threshold / 100 in numbers, (kind, rule["expr"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_checks_and_tests_the_rules():
    for args in (["check", "rules", str(RULES)], ["test", "rules", "cardpool-rules.test.yml"]):
        done = subprocess.run(
            ["promtool", *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr
