"""Source, tests, docs and samples say what and why in the present: no references to a tracker that
is not in the repository (history lives in git; docs/results-history.md is the record of older
results and may name what superseded them). Upstream citations (``LMCache issue #4626``) carry a
``#`` and are not matched."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TRACKER = re.compile(r"\bissue[ -]\d+", re.IGNORECASE)


def test_no_issue_numbers_in_python_files_or_the_readme() -> None:
    files = subprocess.run(
        ["git", "ls-files", "*.py", "README.md", "docs/*.md", "manifests/*", "charts/*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    files = [f for f in files if f != "docs/results-history.md"]
    found = [
        f"{name}:{n}: {line.strip()}"
        for name in files
        if (ROOT / name).is_file()
        for n, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert not found, "\n".join(found[:20])
