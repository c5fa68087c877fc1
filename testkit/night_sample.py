"""The shipped sample of a night's report (docs/night-sample-report.md), rendered from its
JSON (docs/night-sample-report.json, a real report.json of `scripts/try --night` with the
checkout's path replaced) by the current code: what `scripts/try --night --sample docs`
runs, and what the test that the sample is the current format's compares.

    python -m testkit.night_sample REPORT_JSON OUT_MD
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from glm5svc.night.report import report_markdown


def render(report_json: Path) -> str:
    return report_markdown(json.loads(report_json.read_text(encoding="utf-8")))


def main(argv: list[str]) -> int:
    source, target = map(Path, argv)
    target.write_text(render(source), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
