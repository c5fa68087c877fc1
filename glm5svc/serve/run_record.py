"""The last run's record (records.LastRun in `serve-last-run.json`): read once when the
service starts, written once when it ends, for the next start, preflight and tune.

It only reads and writes: the supervision loop decides the exit status and the message,
and holds what the record carries (the diagnosis, the drain, the KV pool) in its state.
A record that cannot be read or written is logged and never stops the service.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.json_output import now_utc
from glm5svc.records import LAST_RUN_FILE, LastRun, RecordError
from glm5svc.serve.phases import PRIORITY_WARNING
from glm5svc.serve.state import SupervisorState


class RunRecord:
    def __init__(self, results_dir: str | Path, log: Callable[[str, int], None]):
        self.results_dir = Path(results_dir)
        self.log = log

    def read(self) -> LastRun | None:
        try:
            return LastRun.read(self.results_dir)
        except RecordError as exc:
            self.log(f"the last run's record is unreadable: {exc}", PRIORITY_WARNING)
            return None

    def write(self, state: SupervisorState, exit_status: int, message: str) -> None:
        """This run, after the previous one (`state.previous_run`), as it ended."""
        record = LastRun.following(
            state.previous_run,
            ended_at=now_utc(),
            exit_status=exit_status,
            message=message,
            diagnosis=tuple(state.diagnosis),
            drain=state.drain,
            kv_pool_tokens=state.kv_pool_tokens,
        )
        path = self.results_dir / LAST_RUN_FILE
        try:
            write_atomic(path, record.to_json(), mode=0o600)
        except OSError as exc:
            self.log(f"cannot record this run in {path}: {exc.strerror}", PRIORITY_WARNING)
