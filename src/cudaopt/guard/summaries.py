"""The Markdown summary of a guard check, for a CI job's page (GitHub's ``$GITHUB_STEP_SUMMARY``,
a merge-request comment): one table per guard file, the lines that explain it below."""

from __future__ import annotations

from .files import GuardReport


def guard_markdown(report: GuardReport) -> str:
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    out = [f"## cudaopt guard: {'passed' if report.passed else 'FAILED'}", ""]
    for check in report.checks:
        gpu = check.gpu
        out += [cell(check.title()) + f" on {cell(gpu.name or '?')} ({gpu.arch or '?'}), driver "
                f"{gpu.driver_version or gpu.driver_cuda_version or '?'}", "",
                f"| case | role | verdict | now µs | before µs | time change | {check.confidence:.0%} interval |",
                "| --- | --- | --- | ---: | ---: | ---: | --- |"]
        for case in check.cases:
            cells = case.cells()
            cells[2] = f"**{case.verdict}**" if case.failed else case.verdict
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
        out += [""] + [f"- {cell(line)}" for line in check.lines()] + [""]
    return "\n".join(out).rstrip() + "\n"
