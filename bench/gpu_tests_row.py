"""The GPU tests' result as a row of bench/RESULTS.md's table (what | GPU | result), from the JUnit XML that
`bash bench/device_suite.sh gpu-tests` writes: date, commit, GPU, passed/failed/skipped, seconds, and each test
that did not pass by name. Standard library only (it runs on the bare GPU image).

    python3 bench/gpu_tests_row.py $OUT/gpu_tests.xml > $OUT/gpu_tests_row.md
"""

from __future__ import annotations

import datetime
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above (standard library only at import)


def gpu_name() -> str:
    names = harness.gpu_names()
    return f"{len(names)} x {names[0]}" if len(names) > 1 else (names[0] if names else "no GPU found")


def row(xml_path: Path, commit: str, gpu: str, today: str) -> str:
    tests = list(ET.parse(xml_path).getroot().iter("testcase"))
    outcome: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in tests:
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome["failed"].append(name)
        elif case.find("skipped") is not None:
            outcome["skipped"].append(name)
        else:
            outcome["passed"].append(name)
    seconds = sum(float(case.get("time") or 0) for case in tests)
    counts = ", ".join(f"{len(v)} {k}" for k, v in outcome.items() if v) or "no test ran"
    named = "; ".join(f"{k}: {', '.join(v)}" for k, v in outcome.items() if k != "passed" and v)
    what = f"the tests marked gpu, {today} (`bash bench/device_suite.sh gpu-tests`, code at {commit})"
    return f"| {what} | {gpu} | **{counts}** in {seconds:.0f} s{'; ' + named if named else ''} |"


def main() -> int:
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        print("usage: python3 bench/gpu_tests_row.py GPU_TESTS_XML (the file gpu-tests writes under $OUT)",
              file=sys.stderr)
        return 2
    commit = harness.command_output(["git", "rev-parse", "--short", "HEAD"]) or "an unknown commit"
    print(row(Path(sys.argv[1]), commit, gpu_name(), datetime.date.today().isoformat()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
