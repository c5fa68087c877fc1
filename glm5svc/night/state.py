"""The night's state file (night.json in its folder): what each step did, written atomically
after every change, so that a night killed at any point continues where it stopped.

A step is `running` from its start until it records `done` (or `skipped`); a night that
finds a step `running` was cut there and runs that step again: each step is written to end
in the same state however often it runs. `CURRENT_FILE` under service.results_dir names the
night in progress; glm5-tune.service runs only while it exists (ConditionPathExists=).
"""

from __future__ import annotations

import json
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
        }

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, night_dir: Path) -> NightState:
        path = Path(night_dir) / STATE_FILE
        fix = "give the folder `glm5svc night begin` made (service.results_dir/night/<time>)"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file: not a night's folder; {fix}") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read it ({exc}); {fix}") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ConfigError(f"{path}: not a night's state ({SCHEMA}); {fix}")
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
            )
        except KeyError as exc:
            raise ConfigError(f"{path}: {exc.args[0]} is missing; {fix}") from None


def current_file(results_dir: Path) -> Path:
    return Path(results_dir) / CURRENT_FILE


def current_night(results_dir: Path) -> Path | None:
    """The night in progress (CURRENT_FILE names its folder), or None."""
    try:
        text = current_file(results_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return Path(text) if text else None


def set_current(results_dir: Path, night_dir: Path | None) -> None:
    path = current_file(results_dir)
    if night_dir is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, f"{night_dir}\n")
