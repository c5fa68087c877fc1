"""What the night leaves on the box, looked at rather than assumed: whether the configuration
file is one the night left there (the evening's, or the overlay it applied) or drift,
whether glm5.service runs on the file (its /status names the sha256 of the file it started
on), and a restart that records its intent first and happens only when it does not.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config, load_config
from glm5svc.errors import Glm5Error
from glm5svc.night import units
from glm5svc.night.serving import running_sha256, serving_now, wait_serving
from glm5svc.night.state import NightState, file_sha256
from glm5svc.tune.applied import HEADER_START


def first_line(exc: BaseException) -> str:
    """An error in one line; a bug's named by its type."""
    text = str(exc).strip() or type(exc).__name__
    if not isinstance(exc, (Glm5Error, OSError)):
        text = f"{type(exc).__name__}: {text}"
    return text.splitlines()[0]


def keep_aside(config_path: Path, why: str) -> Path | None:
    """A copy of the configuration file beside it (`<name>.night-<why>-<time>`), before the
    night writes over it; None when it cannot be read or written."""
    target = Path(config_path).resolve()
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    aside = target.with_name(f"{target.name}.night-{why}-{stamp}")
    try:
        write_atomic(aside, target.read_bytes(), mode=target.stat().st_mode & 0o7777)
    except OSError:
        return None
    return aside


def drift(state: NightState) -> str | None:
    """Why the configuration file is not what the night left there: neither the evening's
    nor the overlay it applied (None: it is one of them, or no evening was kept yet). A
    night killed inside `tune apply` has no record of what it wrote: a file whose first line
    is that apply's header for this night's tune (and its intent recorded) is the night's."""
    if not state.evening_config.exists():
        return None
    now = file_sha256(Path(state.config_path))
    left = {file_sha256(state.evening_config), state.data("apply").get("written_sha256")}
    if now is not None and now in left:
        return None
    if state.intent("apply") and _written_by_apply(Path(state.config_path), state.tune_dir):
        return None
    return (
        f"{state.config_path} was changed during the night, not by the night "
        f"(sha256 {(now or 'unreadable')[:12]}: neither the evening's nor the overlay's); "
        "the edit is left in place"
    )


def _written_by_apply(config_path: Path, tune_dir: Path) -> bool:
    try:
        with open(config_path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
    except OSError:
        return False
    return first.startswith(f"{HEADER_START} {tune_dir}`")


def loads(config_path: str | Path) -> bool:
    try:
        load_config(config_path)
    except Glm5Error:
        return False
    return True


def serve_the_file(state: NightState, config: Config, step: str) -> bool:
    """glm5.service on the configuration file as it is now: restarted unless it already
    runs on it (its /status names the file's sha256). The intent is recorded before the
    restart. True when it restarted."""
    sha = file_sha256(Path(state.config_path))
    if units.is_active():
        wait_serving(config, threading.Event())  # a start in progress answers once up
        if sha is not None and running_sha256(config) == sha:
            return False
    state.intend(step, f"restart glm5.service on {state.config_path}", sha256=sha)
    units.systemctl("reset-failed", units.SERVICE_UNIT, timeout_s=60)
    units.act("restart")
    state.fulfilled(step)
    return True


def serving_line(state: NightState, config: Config) -> str:
    """What serves now, for the report: looked at, one look."""
    why = serving_now(config) if units.is_active() else "glm5.service is not active"
    if why:
        return f"glm5.service does not serve: {why}"
    running = running_sha256(config)
    if running is not None and running == file_sha256(state.evening_config):
        return "glm5.service serves the evening's configuration"
    if running is not None and running == state.data("apply").get("written_sha256"):
        return "glm5.service serves the tuned configuration"
    if running is not None and running == file_sha256(Path(state.config_path)):
        return f"glm5.service serves {state.config_path} as it is now (edited during the night)"
    return "glm5.service serves, on a configuration the night did not leave there"
