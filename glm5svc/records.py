"""What one layer hands another: frozen, typed records, each with one writer and one reader.

Longer than 400 lines: every record that crosses the layers lives here, in one module, so
that tests/structure/test_records.py can hold the rule that no one else reads them by key.

    record = LastRun(ended_at=now_utc(), exit_status=0, message="stopped by SIGTERM: drained")
    write_atomic(path, record.to_json(), mode=0o600)      # the one writer: serve
    LastRun.from_json(path.read_text())                   # the one reader: serve, preflight, tune

- `LastRun`: how the last `glm5svc serve` ended, in `LAST_RUN_FILE` under
  service.results_dir. Written by the supervisor; read back by the next start (its
  /status "previous_run"), preflight (the KV pool it got) and tune (why a trial's start
  failed).
- `StatusDocument`: the service's /status (`glm5svc.status/1`). Written by the supervisor's
  state; read by `glm5svc status`, `status --fleet`, /metrics and tune.
- `BenchmarkStatus`: what the post-start benchmark hands the service (the post-READY
  hook's result), shown in /status "benchmark", exported on /metrics; "degraded" marks
  the service degraded, not unready.
- `PlanSummary`: the launched plan, as /status and the benchmark's results record it.
- `LastNight`: how the last unattended night ended (`LAST_NIGHT_FILE` under
  service.results_dir). Written by `glm5svc night`; read by `glm5svc status` and the
  service's /metrics (`glm5svc_night_outcome`).
- `Diagnosis`, `DrainReport`, `ProbeStatus`, `BenchmarkLevel`: their parts.

A top-level record's JSON names its schema and version (`schema`, as the `--json`
documents do, glm5svc.json_output). A reader refuses another schema, a newer version or a
field of the wrong type with a `RecordError` that names the field; it ignores keys it
does not know (a newer writer's additions) and takes an absent optional field as unset
(an older writer's document: a last-run file or /status from before the schema key).
Outside this module no one reads a record's dict by key (tests/structure enforces it).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

LAST_RUN_FILE = "serve-last-run.json"
LAST_NIGHT_FILE = "night-last.json"
# Present while this replica's night holds its turn behind the gateway (glm5svc/night/
# fleet_turn.py); /metrics shows it as glm5svc_night_turn.
NIGHT_TURN_FILE = "night-turn"
# How a night ends (glm5svc night): tuned (the confirmed overlay serves, no worse than the
# evening), rolled_back (the morning was worse or did not come up: the evening's
# configuration serves again), unchanged (nothing confirmed to apply), stopped (an operator
# stopped it; the evening's configuration serves), failed (a step failed; the evening's
# configuration serves, or the report says why it could not be started).
NIGHT_OUTCOMES = ("tuned", "rolled_back", "unchanged", "stopped", "failed")

Record = TypeVar("Record")


class RecordError(ValueError):
    """A document that is not the record it should be: the message names what and where."""


# ----- the parts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    """A known failure signature found in the server's log (glm5svc.serve.diagnosis)."""

    id: str
    title: str
    cause: str
    fix: str
    evidence: str
    needs_operator: bool = False


@dataclass(frozen=True)
class DrainReport:
    """sglang's own drain after a stop signal: in flight at the stop, most seen, at the last
    reading; `outcome` (drained, killed, survivors: [...]) once it ended."""

    signal: str
    seconds: float
    deadline_s: float
    in_flight_at_start: int | None = None
    most_in_flight: int | None = None
    in_flight: int | None = None
    killed: bool = False
    outcome: str | None = None
    processes_left: int | None = None


@dataclass(frozen=True)
class SglangInstall:
    version: str
    installed: bool
    detail: str


@dataclass(frozen=True)
class PlanSummary:
    """The plan glm5svc serve launches (glm5svc.launch_plan): its argv, the environment's
    names (secret values as a placeholder), sglang, profile, target, GPUs."""

    argv: tuple[str, ...]
    env: dict[str, str]
    sglang_version: str
    tp_size: int
    # Not in the summaries of services older than the stack profiles and targets:
    sglang: SglangInstall | None = None
    profile: str | None = None
    target: str | None = None
    model_architecture: str | None = None
    gpus: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # The sha256 of the configuration file's bytes this service started on (`glm5svc
    # night` restarts glm5.service unless it matches the file's).
    config_sha256: str | None = None

    def flag_value(self, flag: str) -> str | None:
        """The value after `flag` in argv (the last one, as argparse takes it)."""
        found = None
        for name, value in zip(self.argv, self.argv[1:], strict=False):
            if name == flag:
                found = value
        return found


@dataclass(frozen=True)
class ProbeStatus:
    total: int
    failures_total: int
    consecutive_failures: int
    last_progress_age_s: float
    last_ok_age_s: float | None = None
    last_error: str | None = None
    engine_counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkLevel:
    """One concurrency level of the post-start benchmark, as /status and /metrics show it."""

    concurrency: int
    completed: int
    requested: int
    total_tok_s: float | None = None
    output_tok_s: float | None = None
    request_per_s: float | None = None
    median_ttft_ms: float | None = None
    median_itl_ms: float | None = None
    joules_per_output_token: float | None = None
    mean_power_share: float | None = None
    vs_baseline_pct: float | None = None


@dataclass(frozen=True)
class BenchmarkStatus:
    """The post-start benchmark as the service keeps it: the post-READY hook's result.
    A failed run is `BenchmarkStatus.failed(error)`: only `error` set."""

    run_id: str | None = None
    kind: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    results_dir: str | None = None
    complete: bool = False
    stopped_reason: str | None = None
    telemetry: str | None = None
    below_baseline: bool = False
    baseline: str | None = None
    knee_concurrency: int | None = None
    gpus_underused: bool | None = None
    levels: tuple[BenchmarkLevel, ...] = ()
    summary: dict[str, float] = field(default_factory=dict)  # the best level's headline
    degraded: bool = False  # below the baseline and configured to say so
    error: str | None = None

    @classmethod
    def failed(cls, error: str) -> BenchmarkStatus:
        return cls(error=error)


# ----- the documents ------------------------------------------------------------------


@dataclass(frozen=True)
class LastRun:
    """How the last `glm5svc serve` ended (LAST_RUN_FILE in service.results_dir)."""

    SCHEMA: ClassVar[str] = "glm5svc.last-run"
    VERSION: ClassVar[int] = 1

    ended_at: str | float  # ISO 8601 (glm5svc.json_output); unix seconds in older records
    exit_status: int
    message: str
    diagnosis: tuple[Diagnosis, ...] = ()
    failed_runs_in_a_row: int = 0
    drain: DrainReport | None = None
    kv_pool_tokens: int | None = None

    @classmethod
    def following(
        cls,
        previous: LastRun | None,
        *,
        ended_at: str,
        exit_status: int,
        message: str,
        diagnosis: tuple[Diagnosis, ...] = (),
        drain: DrainReport | None = None,
        kv_pool_tokens: int | None = None,
    ) -> LastRun:
        """This run's record after `previous`: failed runs in a row count on from it."""
        earlier = previous.failed_runs_in_a_row if previous else 0
        return cls(
            ended_at=ended_at,
            exit_status=exit_status,
            message=message,
            diagnosis=diagnosis,
            failed_runs_in_a_row=earlier + 1 if exit_status else 0,
            drain=drain,
            kv_pool_tokens=kv_pool_tokens,
        )

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> LastRun:
        return from_json(cls, text)

    @classmethod
    def read(cls, results_dir: str | Path) -> LastRun | None:
        """The record in results_dir; None when there is none. RecordError (naming the
        file and the fix) when the file is not a last-run record."""
        return _read_record(
            cls, Path(results_dir) / LAST_RUN_FILE,
            "glm5svc serve writes it again when it next stops (remove it to forget the last "
            "run)",
        )  # fmt: skip


@dataclass(frozen=True)
class StatusDocument:
    """The service's /status: phase, readiness and why, drain, probes, the previous run, the
    launched plan, the post-start benchmark."""

    SCHEMA: ClassVar[str] = "glm5svc.status"
    VERSION: ClassVar[int] = 1

    ready: bool
    phase: str
    service: str = "glm5svc"
    version: str | None = None
    status: str | None = None
    ready_reason: str | None = None
    draining: bool = False
    wedged: bool = False
    unresponsive: bool = False
    stopped_pids: tuple[int, ...] = ()
    drain: DrainReport | None = None
    degraded: bool = False
    pid: int | None = None
    engine_pid: int | None = None
    engine_exit_status: int | None = None
    started_at: str | float | None = None  # unix seconds from services before ISO 8601
    uptime_s: float | None = None
    engine_uptime_s: float | None = None
    startup_seconds: float | None = None
    load_percent: int | None = None
    kv_pool_tokens: int | None = None
    engine_starts: int = 0
    restarts_seen: int = 0
    previous_run: LastRun | None = None
    probes: ProbeStatus | None = None
    diagnosis: tuple[Diagnosis, ...] = ()
    last_error: str | None = None
    launch_plan: PlanSummary | None = None
    plan_warnings: tuple[str, ...] = ()
    benchmark: BenchmarkStatus | None = None
    benchmark_running: bool = False

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=2)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_json(cls, text: str) -> StatusDocument:
        return from_json(cls, text)

    @classmethod
    def from_dict(cls, data: Any) -> StatusDocument:
        return from_dict(cls, data)


@dataclass(frozen=True)
class LastNight:
    """How the last `glm5svc night` ended (LAST_NIGHT_FILE in service.results_dir)."""

    SCHEMA: ClassVar[str] = "glm5svc.last-night"
    VERSION: ClassVar[int] = 1

    night_outcome: str  # one of NIGHT_OUTCOMES
    night_dir: str
    night_began_at: str  # ISO 8601 (glm5svc.json_output)
    night_ended_at: str
    night_headline: str  # one line: what the night did and why
    evening_tok_s: float | None = None
    morning_tok_s: float | None = None
    # morning / evening with its interval (None where either side was not measured)
    night_ratio: float | None = None
    night_ratio_low: float | None = None
    night_ratio_high: float | None = None

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> LastNight:
        record = from_json(cls, text)
        if record.night_outcome not in NIGHT_OUTCOMES:
            raise RecordError(
                f"night_outcome: {record.night_outcome!r}, expected one of {NIGHT_OUTCOMES}"
            )
        return record

    @classmethod
    def read(cls, results_dir: str | Path) -> LastNight | None:
        """The record in results_dir; None when no night ended there. RecordError (naming
        the file) when the file is not a last-night record."""
        return _read_record(
            cls, Path(results_dir) / LAST_NIGHT_FILE,
            "the next `glm5svc night` writes it again (remove it to forget the last night)",
        )  # fmt: skip


# ----- the one writer and the one reader ------------------------------------------------


def to_dict(record: Any) -> dict[str, Any]:
    """A record as JSON-able data; a document's `schema` first."""
    schema = getattr(type(record), "SCHEMA", None)
    head = {"schema": f"{schema}/{type(record).VERSION}"} if schema else {}
    body = {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}
    return {**head, **body}


def from_json(cls: type[Record], text: str | bytes) -> Record:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"not JSON ({exc})") from None
    return from_dict(cls, data)


def from_dict(cls: type[Record], data: Any, where: str = "") -> Record:
    """`data` as a `cls`; RecordError naming the first field that is not what it should be."""
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise RecordError(f"{where} is a {_kind(data)}, not an object")
    schema = getattr(cls, "SCHEMA", None)
    if schema and "schema" in data:
        _check_schema(cls, data["schema"], where)
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name not in data or (data[f.name] is None and not required):
            if required:
                raise RecordError(f"{where}: '{f.name}' is missing")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
    return cls(**values)


def _check_schema(cls: type, value: Any, where: str) -> None:
    name, _, version = str(value).partition("/")
    if name != cls.SCHEMA or not version.isdigit():
        raise RecordError(f"{where}: schema {value!r}, expected {cls.SCHEMA}/{cls.VERSION}")
    if int(version) > cls.VERSION:
        raise RecordError(
            f"{where}: schema {value!r} is newer than this glm5svc reads "
            f"({cls.SCHEMA}/{cls.VERSION}); upgrade glm5svc here"
        )


def _value(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        options = [h for h in typing.get_args(hint) if h is not type(None)]
        if value is None:
            return None
        errors = []
        for option in options:
            try:
                return _value(option, value, where)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0])
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise RecordError(f"{where} is {_shown(value)}, expected a list")
        (item,) = typing.get_args(hint)[:1]
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise RecordError(f"{where} is {_shown(value)}, expected an object")
        _, item = typing.get_args(hint)
        return {str(k): _value(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, hint):
        return value
    raise RecordError(f"{where} is {_shown(value)}, expected a {hint.__name__}")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return to_dict(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _kind(value: Any) -> str:
    return {list: "list", str: "string", type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_record(cls, path: Path, rewritten_by: str):
    """A record file read by its class's from_json: None when there is none, RecordError
    naming the file, the cause and who writes it again."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        return cls.from_json(text)
    except RecordError as exc:
        raise RecordError(f"{path}: {exc}; {rewritten_by}") from None
