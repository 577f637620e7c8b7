"""JUnit XML of a guard check, the format CI systems show as tests (GitHub, GitLab, Jenkins):
one suite per guard file, one test case per experiment case, the figures in each failure."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from .files import GuardCheck, GuardedCase, GuardReport

COUNTS = ("tests", "failures", "errors", "skipped")


def junit_xml(report: GuardReport) -> str:
    root = ET.Element("testsuites", name="cudaopt guard")
    totals: Counter = Counter()
    wall = 0.0
    for check in report.checks:
        suite = ET.SubElement(root, "testsuite", name=check.file, time=f"{check.wall_s:.3f}")
        properties = ET.SubElement(suite, "properties")
        for name, value in _properties(check):
            ET.SubElement(properties, "property", name=name, value=value)
        counts: Counter = Counter()
        for case in check.cases:
            counts["tests"] += 1
            element = ET.SubElement(suite, "testcase", name=case.name,
                                    classname=f"cudaopt.guard.{Path(check.file).stem}")
            outcome = _outcome(case)
            if outcome is None:
                ET.SubElement(element, "system-out").text = f"{case.verdict}: {case.message}"
                continue
            counts[outcome] += 1
            tag = {"failures": "failure", "errors": "error", "skipped": "skipped"}[outcome]
            ET.SubElement(element, tag, message=f"{case.verdict}: {case.message}", type=case.verdict).text = \
                _details(check, case)
        for key in COUNTS:
            suite.set(key, str(counts[key]))
        totals.update(counts)
        wall += check.wall_s
    for key in COUNTS:
        root.set(key, str(totals[key]))
    root.set("time", f"{wall:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _outcome(case: GuardedCase) -> str | None:
    if case.verdict == "error":  # the old kernel failed: the comparison, not the kernel
        return "errors"
    if case.failed:
        return "failures"
    return "skipped" if case.verdict == "skipped" else None


def _properties(check: GuardCheck) -> list[tuple[str, str]]:
    gpu = check.gpu
    return [("kernel", check.kernel), ("against", check.against), ("mode", check.mode),
            ("gpu", f"{gpu.name} ({gpu.arch}), driver {gpu.driver_version or gpu.driver_cuda_version}"),
            ("seed", str(check.seed)), ("repeats", str(check.repeats)),
            ("max_slowdown", f"{check.max_slowdown:g}"), ("confidence", f"{check.confidence:g}")]


def _details(check: GuardCheck, case: GuardedCase) -> str:
    lines = [f"{case.name} ({case.role}): {case.verdict}", case.message]
    if case.candidate_medians_us:
        lines.append("medians now (µs): " + ", ".join(f"{v:.3f}" for v in case.candidate_medians_us))
        lines.append("medians before (µs): " + ", ".join(f"{v:.3f}" for v in case.baseline_medians_us))
    lines += [f"environment: {line}" for line in check.environment_differences]
    lines.append(f"kernel {check.kernel} against {check.against}; seed {check.seed} (--seed reproduces the inputs)")
    return "\n".join(lines)
