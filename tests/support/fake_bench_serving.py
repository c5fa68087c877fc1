"""An interpreter stand-in for `python -m sglang.bench_serving` (tests of glm5svc bench)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "bench" / "fixtures"


def fake_python(tmp_path: Path, behaviour: str) -> tuple[Path, Path]:
    """An interpreter stand-in for `python -m sglang.bench_serving`: 'hang' (records its pid
    and sleeps) or 'ok' (writes a recorded 0.5.9 result line and exits)."""
    pid_file = tmp_path / "bench_serving.pid"
    line = (FIXTURES / "bench_serving-0.5.9.jsonl").read_text().splitlines()[0]
    script = tmp_path / f"python-{behaviour}"
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import os, sys, time
            args = sys.argv[1:]
            if args[:2] != ["-m", "sglang.bench_serving"]:  # provenance probes: real python
                os.execv({sys.executable!r}, [{sys.executable!r}, *args])
            # Renamed into place: a test that sees the file reads the whole pid.
            with open({str(pid_file)!r} + ".part", "w") as part:
                part.write(str(os.getpid()))
            os.replace({str(pid_file)!r} + ".part", {str(pid_file)!r})
            if {behaviour!r} == "hang":
                time.sleep(300)
            with open(args[args.index("--output-file") + 1], "w") as out:
                out.write({line!r} + "\\n")
            """
        )
    )
    script.chmod(0o755)
    return script, pid_file
