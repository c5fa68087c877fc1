"""`scripts/try --night`: one short unattended night, no GPU, no root, nothing outside the
checkout: the try-out's configuration (testkit/try_out.py: the test engine as
server.command, loopback ports), glm5.service and glm5-tune.service run by the stand-in
service manager (testkit/systemctl_stand_in.py: real processes, its `systemctl` first on
PATH), then `glm5svc night begin` as an operator types it. The night runs in the stand-in
glm5-tune.service: the evening's bench on a fresh start, the tune the try-out prints (the
running-request cap 4 against 64 at concurrency 16), the confirmed overlay applied, the
morning's bench, the verdict, the report. The try-out prints each step as the night's state
file records it, then where the report is, and the report itself; glm5.service is stopped
at the end. Everything is in .cache/try/<time>/ (the stand-in's units and logs under
systemd/, the night's folder under results/night/).

`--sample DIR` also writes the report as docs/night-sample-report.{json,md} ship it: the
checkout's path replaced by `<checkout>`, the markdown rendered from that JSON by the
current code (testkit/night_sample.py), so a test can tell the sample is the current
format's.

    python3 -m testkit.try_night [--short] [--sample DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from testkit import systemctl_stand_in as systemctl
from testkit.try_out import (
    REPO,
    TUNE_SEARCH,
    TUNE_SPACE_FILE,
    TUNE_WORKLOAD,
    WORK,
    _env,
    ensure_venvs,
    say,
    write_config,
)

SERVICE, NIGHT = "glm5.service", "glm5-tune.service"
NIGHT_BUDGET = "15m"  # a bound: the tune ends when its proposals are measured
NIGHT_WAIT_S = 900.0
SAMPLE_STEM = "night-sample-report"
CHECKOUT = "<checkout>"


def night_env(config: Path, manager: Path) -> dict[str, str]:
    env = _env(config)
    env["PATH"] = f"{systemctl.install(manager)}{os.pathsep}{env.get('PATH', '')}"
    env[systemctl.FOLDER_ENV] = str(manager)
    return env


def define_units(manager: Path, python: Path, config: Path) -> None:
    glm5svc = [str(python), "-m", "glm5svc", "--config", str(config)]
    listen = json.loads(config.read_text())["service"]["listen_port"]
    ready = f"http://127.0.0.1:{listen}/readyz"
    systemctl.define(manager, SERVICE, [*glm5svc, "serve"], ready)
    systemctl.define(manager, NIGHT, [*glm5svc, "night", "resume"])


def begin_command(python: Path, config: Path, windows: int) -> list[str]:
    return [str(python), "-m", "glm5svc", "--config", str(config), "night", "begin", "--json",
            "--budget", NIGHT_BUDGET, "--windows", str(windows), *TUNE_WORKLOAD,
            "--", "--space", str(TUNE_SPACE_FILE), *TUNE_SEARCH]  # fmt: skip


def state_of(night: Path) -> dict:
    try:
        return json.loads((night / "night.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def follow(night: Path, manager: Path) -> dict:
    """Each event of the night's state file as it comes, until the report is written (or
    the night's unit ends without one)."""
    deadline = time.monotonic() + NIGHT_WAIT_S
    said = 0
    while time.monotonic() < deadline:
        state = state_of(night)
        for event in state.get("events", [])[said:]:
            say(f"night: {event['text']}")
        said = max(said, len(state.get("events", [])))
        if state.get("steps", {}).get("report", {}).get("status") == "done":
            return state
        if state and systemctl.unit_pid(manager, NIGHT) is None:
            time.sleep(1.0)  # its last write, if it was still writing
            state = state_of(night)
            if state.get("steps", {}).get("report", {}).get("status") == "done":
                return state
            raise SystemExit(f"try: {NIGHT} ended without a report; its log: "
                             f"{manager / (NIGHT + '.log')}")  # fmt: skip
        time.sleep(1.0)
    raise SystemExit(f"try: the night did not end within {NIGHT_WAIT_S:.0f} s; its log: "
                     f"{manager / (NIGHT + '.log')}")  # fmt: skip


def write_sample(python: Path, night: Path, folder: Path, env: dict[str, str]) -> Path:
    document = (night / "report.json").read_text().replace(str(REPO), CHECKOUT)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{SAMPLE_STEM}.json"
    target.write_text(document)
    subprocess.run([str(python), "-m", "testkit.night_sample", str(target),
                    str(folder / f"{SAMPLE_STEM}.md")], check=True, cwd=REPO, env=env)  # fmt: skip
    return folder / f"{SAMPLE_STEM}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/try --night", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--night", action="store_true", help="this try-out (scripts/try picks it)")
    parser.add_argument("--short", action="store_true", help="two windows a bench (the tests' run)")
    parser.add_argument("--sample", type=Path, metavar="DIR",
                        help=f"also write {SAMPLE_STEM}.json and .md there (docs/)")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.monotonic()
    python, bench_python = ensure_venvs()
    work = WORK / time.strftime("%Y%m%dT%H%M%S")
    work.mkdir(parents=True)
    (work / "model").mkdir()
    config = write_config(work, python, bench_python)
    manager = work / "systemd"
    env = night_env(config, manager)
    os.environ.update(env)  # the stand-in's units inherit it, as systemd's from their unit
    define_units(manager, python, config)
    say(f"configuration {config}; the stand-in service manager's units and logs: {manager}")
    try:
        say(f"systemctl start {SERVICE} (the stand-in: glm5svc serve on the test engine)")
        if systemctl.start(manager, SERVICE) != 0:
            raise SystemExit(f"try: {SERVICE} did not start; its log: {manager / SERVICE}.log")
        command = begin_command(python, config, 2 if args.short else 3)
        say(shlex.join(command))
        begun = subprocess.run(command, cwd=REPO, env=env, text=True, capture_output=True)
        if begun.returncode != 0:
            raise SystemExit(f"try: night begin exited {begun.returncode}: {begun.stderr}")
        night = Path(json.loads(begun.stdout)["night_dir"])
        say(f"the night's folder: {night}; it runs in the stand-in {NIGHT} (its log: "
            f"{manager / NIGHT}.log)")  # fmt: skip
        state = follow(night, manager)
        report = night / "report.md"
        say(f"the night ended {state.get('outcome')}; the night's report: {report}")
        print(report.read_text(), end="", flush=True)
        if args.sample:
            say(f"the sample report: {write_sample(python, night, args.sample, env)}")
    finally:
        systemctl.stop(manager, NIGHT)
        say(f"systemctl stop {SERVICE}")
        systemctl.stop(manager, SERVICE)
    say(f"done in {time.monotonic() - started:.1f} s; everything is in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
