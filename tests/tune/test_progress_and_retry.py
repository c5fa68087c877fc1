"""The redirected tune's progress lines (each phase change, and a steady beat in between,
into the run's log too) and which failures are tried once more."""

from __future__ import annotations

import io
import time

from glm5svc.tune.evidence import TrialRecord
from glm5svc.tune.live import LOG_FILE, Progress
from glm5svc.tune.retry import outside_the_candidate


def test_plain_lines_at_each_phase_change_and_a_beat_between(tmp_path):
    stream = io.StringIO()
    with Progress(live_table=False, stream=stream, every_s=0.2) as progress:
        progress.update("plan", {"lines": ["plan: the first pass is 2 start(s)"],
                                 "run_dir": str(tmp_path)})  # fmt: skip
        progress.update("trial-start", {"number": 0, "candidate": {}})
        progress.update("trial-phase", {"number": 0, "phase": "window 1 (r01-v8)"})
        said = stream.getvalue().count("\n")
        deadline = time.monotonic() + 10
        while stream.getvalue().count("\n") == said and time.monotonic() < deadline:
            time.sleep(0.05)  # nothing happens: the beat says where the tune is
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("plan: the first pass is 2 start(s)")
    assert "trial 0 ((the start)): starting" in lines[1]
    assert "trial 0 ((the start)): window 1 (r01-v8)" in lines[2]
    assert len(lines) > 3 and "trial 0 ((the start)): window 1 (r01-v8)" in lines[3]
    assert (tmp_path / LOG_FILE).read_text().splitlines()[: len(lines)] == lines


def test_the_phase_is_the_running_starts_and_a_cut_start_says_how_to_resume(tmp_path):
    """The executor names the phase by engine start (2), the rows are trials (4: a start's
    live values are several): the running trial's line shows its window. A start cut by
    ^C says so once and how the resume takes it up."""
    stream = io.StringIO()
    with Progress(live_table=False, stream=stream, every_s=3600) as progress:
        progress.update("plan", {"lines": [], "run_dir": str(tmp_path)})
        progress.update("trial-start", {"number": 4, "candidate": {}})
        progress.update("trial-phase", {"number": 2, "phase": "window 3 (r02-v64)"})
        cut = TrialRecord(4, {}, "interrupted", {"failure": "stopped during the warm-up"},
                          verdict="interrupted", start=2)  # fmt: skip
        progress.update("trial-end", {"record": cut})
        progress.update("done", {"stopped_by": "stopped by a signal"})
    lines = stream.getvalue().splitlines()
    assert "trial 4 ((the start)): window 3 (r02-v64)" in lines[1]
    assert 2 not in progress.rows  # no row for the start's number
    assert lines[2].endswith(
        "trial 4 ended: interrupted (stopped during the warm-up): its start was cut; a resume "
        "measures it again"
    )
    assert "interrupted, interrupted" not in stream.getvalue()
    assert lines[-1].endswith(f"stopped: resume it with glm5svc tune run --resume {tmp_path}")


def test_what_is_tried_again():
    def why(failure="", diagnosis=(), held=None, log="", status="failed"):
        return outside_the_candidate(status, failure, list(diagnosis), held, log)

    assert why("not ready within the trial's time limit (--trial-timeout)") == "a timeout"
    assert why(log="OSError: [Errno 98] Address already in use") == "a port clash"
    assert why(diagnosis=["The engine port is taken by another process: ..."]) == "a port clash"
    assert why(held="pid 7 on GPU 0 (900 MiB)").startswith("GPU memory held")
    assert why("the engine did not start: serve exited with 1",
               ["CUDA out of memory: lower tuning.mem_fraction_static"]) is None  # fmt: skip
    assert why("not ready within the trial's time limit", status="measured") is None
