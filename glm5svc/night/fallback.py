"""The night's way back that depends on nothing the night wrote: the evening's configuration
(evening.yaml in the night's folder) back in place and glm5.service started, whatever broke
the night: its state file unreadable, the configuration file not loading, a traceback at
every start until systemd gave up (glm5-tune.service's OnFailure= starts
glm5-night-fallback.service, which runs `glm5svc night fallback`).

It acts first and writes its record after: the file it replaces is kept beside it
(`<name>.night-fallback-<time>`) and named; then the night's state and report (when the
state can be read), else the last night's record alone, say `failed` and why; whatever the
disk refuses is said on stderr (the journal).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config, ServiceSection, load_config
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.json_output import now_utc
from glm5svc.night import units
from glm5svc.night.box import first_line, keep_aside, serving_line
from glm5svc.night.report import write_last_night, write_report, write_textfile
from glm5svc.night.serving import running_sha256, wait_serving
from glm5svc.night.state import (
    EVENING_CONFIG,
    NightState,
    UnreadableNight,
    current_file,
    file_sha256,
    read_current,
)
from glm5svc.records import LastNight


@dataclass
class Recovered:
    did: list[str]
    serving: str | None  # None: glm5.service serves; else why not
    recorded: bool


def recover(
    current_file: Path, night_dir: Path | None, config_path: Path, why: str, log=print
) -> Recovered:
    """The evening's configuration back, glm5.service started on it, then the record.
    `why`: what broke the night, for the record."""
    night_dir = night_dir or read_current(current_file)
    results_dir = Path(current_file).parent
    if night_dir is None:
        return Recovered(["no night in progress: nothing to put back"], None, True)
    try:
        state: NightState | None = NightState.load(night_dir)
    except UnreadableNight as exc:
        state, unreadable = None, str(exc)
    else:
        unreadable = None
    if state is not None and state.status_of("report") == "done":
        # It ended (its report is written): only the marker was left behind.
        return Recovered(["the night had ended"], None, _forget(current_file, log))
    evening_copy = Path(night_dir) / EVENING_CONFIG
    config = _loaded(evening_copy)
    did, serving = put_back(evening_copy, config_path, config, log)
    headline = f"{why}; {'; '.join(did)}" + (
        "" if serving is None else f"; glm5.service does not serve: {serving}"
    )
    log(f"night: failed: {headline}")
    recorded = _record(state, unreadable, Path(night_dir), results_dir, config, headline, log)
    return Recovered(did, serving, recorded and _forget(current_file, log))


def recover_and_say(current_file: Path, night_dir, config_path: Path, why: str, log) -> int:
    """`recover`, said on stdout and stderr; the exit status of `night resume`/`fallback`."""
    done = recover(current_file, night_dir, config_path, why, log=log)
    print(f"night: {'; '.join(done.did)}")
    if done.serving is not None:
        print(f"night: glm5.service does not serve: {done.serving}", file=sys.stderr)
        return 1
    return 0 if done.recorded else 1


def config_or_why(config_arg) -> tuple[Config | None, str | None]:
    """The configuration, or None and why it does not load (the night goes on to end)."""
    try:
        return load_config(config_arg), None
    except ConfigError as exc:
        return None, str(exc).splitlines()[0]


def current_file_of(given: str | None, config: Config | None) -> Path:
    """The file naming the night in progress: the one given (the units pass it), else the
    configuration's, else the default results folder's."""
    if given:
        return Path(given)
    results = config.service.results_dir if config else ServiceSection().results_dir
    return current_file(results)


def put_back(
    evening_copy: Path, config_path: Path, config: Config | None, log=print
) -> tuple[list[str], str | None]:
    """evening.yaml over the configuration file unless they match (the replaced file kept
    beside it), then glm5.service started on it: restarted unless it runs on it. What was
    done, and None when glm5.service serves (else why not)."""
    did = []
    try:
        evening = evening_copy.read_bytes()
    except OSError as exc:
        evening = None
        did.append(f"no evening's copy ({evening_copy}: {exc.strerror or exc}): "
                   f"{config_path} left as it is")  # fmt: skip
    if evening is not None and file_sha256(config_path) != file_sha256(evening_copy):
        aside = keep_aside(config_path, "fallback") if Path(config_path).exists() else None
        target = Path(config_path).resolve()
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
        try:
            write_atomic(target, evening, mode=mode)
        except OSError as exc:
            did.append(f"cannot put {evening_copy} back into {config_path}: {exc}")
        else:
            kept = f" (the file it replaced is kept as {aside})" if aside else ""
            did.append(f"put {evening_copy} back into {config_path}{kept}")
    try:
        units.systemctl("reset-failed", units.SERVICE_UNIT, timeout_s=60)
        runs_it = config is not None and running_sha256(config) == file_sha256(config_path)
        if not (units.is_active() and runs_it):
            units.act("restart")
            did.append("restarted glm5.service")
        else:
            did.append("glm5.service already runs it")
    except Glm5Error as exc:
        return did, first_line(exc)
    if config is None:
        return did, None if units.is_active() else "glm5.service is not active"
    return did, wait_serving(config, threading.Event())


def _loaded(path: Path) -> Config | None:
    try:
        return load_config(path)
    except Glm5Error:
        return None


def _record(state, unreadable, night_dir, results_dir, config, headline, log) -> bool:
    if state is not None:
        state.lenient = True
        for name, entry in state.steps.items():
            if entry.get("status") == "running":
                state.end_step(name, "failed", headline)
        state.outcome, state.headline = "failed", headline
        state.note(f"fallback: {headline}")
        try:
            serving = serving_line(state, config) if config is not None else None
            write_report(state, results_dir, serving)
        except OSError:
            return False  # said on stderr by write_report
    else:
        now = now_utc()
        record = LastNight(
            night_outcome="failed",
            night_dir=str(night_dir),
            night_began_at=now,
            night_ended_at=now,
            night_headline=f"{headline} ({unreadable})",
        )
        try:
            write_last_night(results_dir, record)
        except OSError as exc:
            log(f"night: cannot write the last night's record: {exc}")
            return False
    textfile = config.service.night_textfile if config is not None else None
    why = write_textfile(textfile, results_dir)
    if why:
        log(f"night: the textfile for node_exporter: {why}")
    return True


def _forget(current_file: Path, log) -> bool:
    try:
        Path(current_file).unlink(missing_ok=True)
    except OSError as exc:
        log(f"night: cannot remove {current_file}: {exc}")
        return False
    return True
