"""The night's state file (night.json in its folder): what each step did, written atomically
after every change, so that a night killed at any point continues where it stopped.

A step is `running` from its start until it records `done` (or `skipped`); a night that
finds a step `running` was cut there and runs that step again: each step is written to end
in the same state however often it runs. `CURRENT_FILE` under service.results_dir names the
night in progress; glm5-tune.service runs only while it exists (ConditionPathExists=).

Intent before action: a step about to change the box (write the configuration, restart
glm5.service) records what it is about to do (`intend`) before it does it, so that a night
killed in between finishes the action instead of taking it as done.

Once the night is failing, stopping or rolling back (`lenient`), a save that the disk
refuses (full, read-only) does not stop the rollback: the state goes to stderr (the journal)
and to a spare copy in $RUNTIME_DIRECTORY (glm5-tune.service's RuntimeDirectory=, a tmpfs
kept across the unit's restarts), which `load` prefers while it is the newer of the two.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5svc.atomic_file import write_atomic
from glm5svc.errors import ConfigError
from glm5svc.json_output import now_utc
from glm5svc.unit_file import NIGHT_CURRENT

SCHEMA = "glm5svc.night/1"
STATE_FILE = "night.json"
NIGHTS_FOLDER = "night"
CURRENT_FILE = NIGHT_CURRENT  # under service.results_dir: the night in progress
EVENING_CONFIG = "evening.yaml"  # the configuration as the evening served it, byte for byte
# In order. `rollback` runs only when the morning is worse or does not come up.
STEPS = ("evening", "baseline", "tune", "apply", "morning", "compare", "rollback", "report")
SPARE_ENV = "RUNTIME_DIRECTORY"  # systemd's, for RuntimeDirectory= (the night's unit sets one)


def file_sha256(path: Path) -> str | None:
    """The sha256 of a file's bytes; None when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def spare_path(night_dir: Path) -> Path | None:
    """Where the night's state goes when its folder refuses it (None: no such place)."""
    folder = os.environ.get(SPARE_ENV, "").split(":")[0]
    return Path(folder) / f"{Path(night_dir).name}.{STATE_FILE}" if folder else None


@dataclass
class NightState:
    night_dir: Path
    config_path: str
    began_at: str
    deadline_at: str  # ISO 8601
    budget_s: float
    workload: dict[str, Any]
    windows: int
    tune_args: list[str]
    plan: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, str]] = field(default_factory=list)
    outcome: str | None = None
    headline: str | None = None
    ended_at: str | None = None
    saves: int = 0  # how many times it was saved: the spare copy is taken while newer
    # Not saved: once True, a save the disk refuses is said and kept aside, never raised.
    lenient: bool = field(default=False, repr=False, compare=False)
    unsaved: str | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> Path:
        return self.night_dir / STATE_FILE

    @property
    def evening_config(self) -> Path:
        return self.night_dir / EVENING_CONFIG

    @property
    def tune_dir(self) -> Path:
        return self.night_dir / "tune"

    def step(self, name: str) -> dict[str, Any]:
        return self.steps.setdefault(name, {"status": "pending"})

    def status_of(self, name: str) -> str:
        return self.steps.get(name, {}).get("status", "pending")

    def data(self, name: str) -> dict[str, Any]:
        return self.step(name).setdefault("data", {})

    def begin_step(self, name: str) -> None:
        entry = self.step(name)
        if entry["status"] == "running":
            entry["attempts"] = entry.get("attempts", 1) + 1
            self.note(f"{name}: continued after an interruption (attempt {entry['attempts']})")
        else:
            entry["attempts"] = 1
        entry.update(status="running", began_at=now_utc())
        self.save()

    def end_step(self, name: str, status: str, detail: str, **data: Any) -> None:
        entry = self.step(name)
        entry.update(status=status, ended_at=now_utc(), detail=detail)
        entry.setdefault("data", {}).update(data)
        self.note(f"{name}: {detail}")

    def intend(self, name: str, action: str, **facts: Any) -> None:
        """Record what step `name` is about to do, before it does it."""
        self.step(name)["intent"] = {"action": action, "at": now_utc(), **facts}
        self.note(f"{name}: about to {action}")

    def intent(self, name: str) -> dict[str, Any] | None:
        return self.steps.get(name, {}).get("intent")

    def fulfilled(self, name: str) -> None:
        """The recorded intent of `name` is done."""
        done = self.step(name).pop("intent", None)
        if done is not None:
            self.step(name).setdefault("done", []).append(done["action"])
            self.save()

    def note(self, text: str) -> None:
        self.events.append({"at": now_utc(), "text": text})
        self.save()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "night_dir": str(self.night_dir),
            "config_path": self.config_path,
            "began_at": self.began_at,
            "deadline_at": self.deadline_at,
            "budget_s": self.budget_s,
            "workload": self.workload,
            "windows": self.windows,
            "tune_args": self.tune_args,
            "plan": self.plan,
            "steps": self.steps,
            "events": self.events,
            "outcome": self.outcome,
            "headline": self.headline,
            "ended_at": self.ended_at,
            "saves": self.saves,
        }

    def save(self) -> None:
        """night.json, atomically. Lenient: a refused write goes to stderr and the spare."""
        self.saves += 1
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            if not self.lenient:
                raise
            first = self.unsaved is None
            self.unsaved = f"{self.path}: {exc.strerror or exc}"
            kept = _keep_spare(spare_path(self.night_dir), text)
            if first:
                print(f"glm5svc night: cannot save {self.unsaved}; {kept}", file=sys.stderr)
            if self.events:
                print(f"glm5svc night: {self.events[-1]['text']}", file=sys.stderr, flush=True)
        else:
            self.unsaved = None

    @classmethod
    def load(cls, night_dir: Path) -> NightState:
        """The state in night.json, or its spare copy where that is newer (or the only one
        readable); UnreadableNight naming the file when neither can be read."""
        path = Path(night_dir) / STATE_FILE
        try:
            data = _read_state(path)
        except UnreadableNight as exc:
            data, problem = None, exc
        spare = spare_path(night_dir)
        if spare is not None and spare.is_file():
            try:
                kept = _read_state(spare)
            except UnreadableNight:
                kept = None
            if kept is not None and (data is None or kept.get("saves", 0) > data.get("saves", 0)):
                data = kept
        if data is None:
            raise problem
        fix = "give the folder `glm5svc night begin` made (service.results_dir/night/<time>)"
        try:
            return cls(
                night_dir=Path(night_dir),
                **{
                    k: data[k]
                    for k in (
                        "config_path",
                        "began_at",
                        "deadline_at",
                        "budget_s",
                        "workload",
                        "windows",
                        "tune_args",
                    )
                },
                plan=data.get("plan") or {},
                steps=data.get("steps") or {},
                events=data.get("events") or [],
                outcome=data.get("outcome"),
                headline=data.get("headline"),
                ended_at=data.get("ended_at"),
                saves=int(data.get("saves") or 0),
            )
        except KeyError as exc:
            raise UnreadableNight(f"{path}: {exc.args[0]} is missing; {fix}") from None


def _keep_spare(spare: Path | None, text: str) -> str:
    if spare is None:
        return f"no spare place (${SPARE_ENV} is not set)"
    try:
        write_atomic(spare, text, mode=0o600)
    except OSError as exc:
        return f"nor in {spare} ({exc.strerror or exc})"
    return f"kept in {spare}"


class UnreadableNight(ConfigError):
    """A night's state file that cannot be read (gone, truncated, not a night's)."""


def _read_state(path: Path) -> dict[str, Any]:
    fix = "give the folder `glm5svc night begin` made (service.results_dir/night/<time>)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnreadableNight(f"{path}: no such file: not a night's folder; {fix}") from None
    except (OSError, ValueError) as exc:
        raise UnreadableNight(f"{path}: cannot read it ({exc}); {fix}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UnreadableNight(f"{path}: not a night's state ({SCHEMA}); {fix}")
    return data


def holds_a_night(folder: Path) -> bool:
    """Whether a folder already holds a night (its state or its evening's copy)."""
    return (Path(folder) / STATE_FILE).exists() or (Path(folder) / EVENING_CONFIG).exists()


def current_file(results_dir: Path) -> Path:
    return Path(results_dir) / CURRENT_FILE


def current_night(results_dir: Path) -> Path | None:
    """The night in progress (CURRENT_FILE names its folder), or None."""
    return read_current(current_file(results_dir))


def read_current(path: Path) -> Path | None:
    """The night a CURRENT_FILE names, or None (no file, or an empty one)."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return Path(text) if text else None


def set_current(results_dir: Path, night_dir: Path | None) -> None:
    path = current_file(results_dir)
    if night_dir is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, f"{night_dir}\n")
