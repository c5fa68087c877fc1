"""One `sglang.bench_serving` process for many runs: it imports bench_serving once (10-15 s
on the GPU machine) and then runs each job it reads from stdin as `python -m
sglang.bench_serving ARGV` would, so a run costs its own seconds and not the imports.

Protocol (one JSON object a line): a job `{"argv": [...]}` on stdin; `@@ready` once the
imports are done and `@@done {"ok": ..., "wall_s": ...}` after each job on stdout.
bench_serving's own printing goes to stderr. Standard library only: it runs with the
interpreter that has sglang (the machine's, or a CPU rehearsal's bench venv).
"""

from __future__ import annotations

import json
import runpy
import sys
import time
import warnings


def main() -> None:
    replies = sys.stdout
    sys.stdout = sys.stderr
    # runpy warns that the module is already imported: that is the point of this driver.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
    import sglang.bench_serving  # noqa: F401 - the imports paid once

    print("@@ready", file=replies, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        sys.argv = ["bench_serving", *job["argv"]]
        t0 = time.monotonic()
        status: dict = {"ok": True}
        try:
            runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=False)
        except SystemExit as stop:
            status = {"ok": stop.code in (0, None), "exit": stop.code}
        except Exception as err:  # noqa: BLE001 - reported to the scenario, which goes on
            status = {"ok": False, "error": f"{type(err).__name__}: {err}"[-800:]}
        sys.stderr.flush()
        status["wall_s"] = round(time.monotonic() - t0, 3)
        print("@@done " + json.dumps(status, default=str), file=replies, flush=True)


if __name__ == "__main__":
    main()
