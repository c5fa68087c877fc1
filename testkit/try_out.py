"""The GPU-free try-out behind `scripts/try`: glm5svc as an operator sees it, on loopback.

No GPU, no root, nothing outside the checkout: the test engine (testkit/sglang_test_engine.py,
standing in for sglang.launch_server) under `glm5svc serve`, `glm5svc status` once it is
ready, a small `glm5svc bench` ladder with the real sglang 0.5.9 bench_serving, then a
clean stop (SIGTERM, as systemd stops glm5.service; serve drains and exits 0) and
`glm5svc status` saying nothing listens (exit 3).

Runs with any Python 3.11+ (standard library only); glm5svc runs in a venv:
- `.venv` when `scripts/setup-dev.sh` made it, else `.cache/venvs/try`, built here with
  glm5svc's dependencies from pyproject.toml except systemd-python (it compiles against
  libsystemd's headers, which need root to install; outside systemd glm5svc logs to stderr
  and sends no notify messages, so it is not needed), and sglang 0.5.9's bench_serving with
  its few dependencies (testkit/bench_venv.py's spec) in the same venv;
- bench_serving: the tests' venv `.cache/venvs/sglang-0.5.9-bench` when it is built, else
  the try venv.
What is specific to the try-out (the test engine as server.command, preflight off since
there is no GPU to check, loopback ports) is in the configuration it writes and prints.
Everything goes to .cache/try/ (git-ignored): the configuration and the tune space, and per
run (.cache/try/<time>/) serve's log and the results;
`.cache/bin/glm5svc` runs this checkout's glm5svc from any folder (the try-out prints the
`export PATH=...` line), and the try venv's `python -m glm5svc` works from any folder too.
The export line is the same every run: the configuration is `.cache/try/glm5.yaml`, written
anew by each run, which keeps the ports of the one before when they are free
(`.cache/try/ports.json`).

Sized to the CPU: the configuration's benchmark is a ladder of 4 and 16 at 64 tokens in, 16
out, steady windows of SHORT_STEADY's window_s, each measured within its own bench_serving
run (its start, first wave and drain around it take longer than the window), so a plain
`glm5svc bench` takes a few minutes at most; the tune
space it writes beside it (`tune-space.yaml`, the running-request cap at 4, the configuration's,
and 64, a live knob: one engine start and the best's confirming start) and the tune command it
prints (TUNE_OPTIONS) finish in a few minutes.
The tune starts its own engines on the configuration's port: stop the try-out first.

    python3 -m testkit.try_out [--keep-running] [--short]

`scripts/try --night` runs one short unattended night instead (testkit/try_night.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from glm5svc.child_group import ChildGroup, spawn
from testkit.bench_venv import (
    BENCH_SERVING_DEPS,
    DEFAULT_VENV,
    SGLANG_VERSION,
    TOKENIZER_SCRIPT,
    VENV_SPEC,
)
from testkit.engine import SHORT_STEADY, TEST_ENGINE, free_port

REPO = Path(__file__).resolve().parents[1]
TRY_VENV = REPO / ".cache" / "venvs" / "try"
WORK = REPO / ".cache" / "try"
BIN = REPO / ".cache" / "bin"  # the glm5svc command the try-out names
# Needs root to build (libsystemd headers); glm5svc works without it outside systemd.
NOT_NEEDED = ("systemd-python",)
LADDER = [4, 16]
CONFIG = WORK / "glm5.yaml"  # the latest run's configuration: one path for the export line
PORTS = WORK / "ports.json"  # the last run's ports, taken again when free
PORT_KEYS = ("server", "listen")
TUNE_SPACE_FILE = WORK / "tune-space.yaml"
# The tune's workload and search, sized to the test engine on a CPU (one engine start for the
# live cap's two values, its confirming start): minutes, not GLM-5's hours.
CAP = "tuning.max_running_requests"
TUNE_SPACE = {"knobs": [{"key": CAP, "values": [4, 64], "restart": False}]}
TUNE_WORKLOAD = ["--concurrency", "16", "--input-len", "64", "--output-len", "16"]
TUNE_SEARCH = ["--window", "1", "--settle", "0.5", "--min-repeats", "2", "--max-repeats", "4",
               "--max-trials", "2"]  # fmt: skip
TUNE_OPTIONS = [*TUNE_WORKLOAD, *TUNE_SEARCH]
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def say(text: str) -> None:
    print(f"try: {text}", flush=True)


def glm5svc_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [
        dep for dep in project["dependencies"] if not dep.replace(" ", "").startswith(NOT_NEEDED)
    ]


def _imports(python: Path, modules: str) -> bool:
    if not python.exists():
        return False
    check = subprocess.run([str(python), "-c", f"import {modules}"], capture_output=True)
    return check.returncode == 0


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        check=True,
    )


def ensure_venvs() -> tuple[Path, Path]:
    """(the interpreter that runs glm5svc, the one that runs bench_serving)."""
    glm5svc_modules = "yaml, pydantic, rich, prometheus_client, matplotlib, optuna, packaging"
    dev = REPO / ".venv" / "bin" / "python"
    bench = DEFAULT_VENV / "bin" / "python"
    bench_ready = (DEFAULT_VENV / ".glm5svc-ready").is_file() and bench.exists()
    if _imports(dev, glm5svc_modules) and bench_ready:
        return dev, bench
    spec = " ".join([*glm5svc_requirements(), VENV_SPEC])
    python = TRY_VENV / "bin" / "python"
    marker = TRY_VENV / ".glm5svc-try-ready"
    if not (marker.is_file() and marker.read_text() == spec and python.exists()):
        say(f"building {TRY_VENV.relative_to(REPO)} (once): glm5svc's dependencies and "
            f"sglang {SGLANG_VERSION}'s bench_serving")  # fmt: skip
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(TRY_VENV)], check=True)
        # Byte-compiling every file is most of pip's CPU time; Python compiles what it imports.
        _pip(python, "--no-compile", *glm5svc_requirements(), *BENCH_SERVING_DEPS)
        # Last, so that pip does not list sglang's own (unwanted) dependencies as missing.
        _pip(python, "--no-compile", f"sglang=={SGLANG_VERSION}", "--no-deps")
        marker.write_text(spec)
    # The checkout on the venv's path (what an editable install does): `-m glm5svc` anywhere.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "glm5svc-checkout.pth").write_text(f"{REPO}\n")
    return python, python


def link_command(python: Path) -> Path:
    """.cache/bin/glm5svc: this checkout's glm5svc on the try-out's Python, from any folder."""
    BIN.mkdir(parents=True, exist_ok=True)
    command = BIN / "glm5svc"
    command.write_text(
        "#!/bin/sh\n# glm5svc of this checkout with the try-out's venv (written by scripts/try)\n"
        f"PYTHONPATH={shlex.quote(str(REPO))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f'exec {shlex.quote(str(python))} -m glm5svc "$@"\n'
    )
    command.chmod(0o755)
    return command


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stable_ports() -> dict[str, int]:
    """The last run's server and listener ports when both are free, else new ones (saved)."""
    try:
        ports = json.loads(PORTS.read_text())
        if not all(isinstance(ports.get(k), int) and port_is_free(ports[k]) for k in PORT_KEYS):
            raise ValueError("taken")
    except (OSError, ValueError, AttributeError):
        ports = {"server": free_port(), "listen": free_port()}
    PORTS.write_text(json.dumps(ports) + "\n")
    return ports


def write_config(work: Path, python: Path, bench_python: Path) -> Path:
    tokenizer = work / "tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        subprocess.run(
            [str(bench_python), str(TOKENIZER_SCRIPT), str(tokenizer)],
            check=True, env=_env(work / "glm5.yaml"),
        )  # fmt: skip
    ports = stable_ports()
    config = {
        "model": {"path": str(work / "model"), "tokenizer_path": str(tokenizer)},
        "server": {
            "host": "127.0.0.1",
            "port": ports["server"],
            # The test engine instead of `python -m sglang.launch_server` (no GPU here).
            # Its steps mostly sleep, so its figures hold still on a busy CPU and the
            # regression gate can judge one run against another.
            "command": [
                str(python),
                str(TEST_ENGINE),
                "--test-mode",
                "load=0.5",
                "--step-base-ms",
                "30",
                "--step-per-req-ms",
                "1",
            ],  # fmt: skip
        },
        "service": {
            "listen_host": "127.0.0.1",
            "listen_port": ports["listen"],
            "run_preflight": False,  # nothing to check without a GPU; `glm5svc preflight` says so
            "drain_timeout_s": 10,
            "results_dir": str(work / "results"),
        },
        "telemetry": {"enabled": False},
        # A cap under the tune's concurrency (16): what the try-out's tune finds and applies.
        "tuning": {"max_running_requests": 4},
        # A bench sized for the CPU (GLM-5's defaults, 64-2048 at 1,024 in and 512 out, take
        # hours here) with steady windows sized for the test engine (minutes a window on GLM-5).
        "benchmark": {
            "python": str(bench_python),
            "ladder": LADDER,
            "input_len": 64,
            "output_len": 16,
            "warmup_requests": 2,
            "baseline": None,
            "post_start": {"enabled": False},
            **SHORT_STEADY,
            "windows": 3,  # the regression gate's replication
        },
    }
    CONFIG.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    TUNE_SPACE_FILE.write_text(json.dumps(TUNE_SPACE, indent=2) + "\n")
    return CONFIG


def tune_command() -> list[str]:
    """The try-out's tune, as a user types it (glm5svc on the PATH the try-out prints)."""
    return ["glm5svc", "tune", "run", "--space", str(TUNE_SPACE_FILE), *TUNE_OPTIONS]


def glm5svc(python: Path, config: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "glm5svc", "--config", str(config), *args],
        cwd=REPO, env=_env(config), text=True, **kwargs,
    )  # fmt: skip


def _env(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env["PYTHONPATH"] = str(REPO)
    env["GLM5SVC_LOG_TARGET"] = "stderr"
    env["RUNTIME_DIRECTORY"] = str(config.parent / "run")
    env["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"  # "None of PyTorch ... found": none needed
    return env


def wait_ready(python: Path, config: Path, serve: ChildGroup) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"try: glm5svc serve exited with {serve.returncode}; see its log")
        status = glm5svc(python, config, "status", capture_output=True)
        if status.returncode == 0:
            return status
        time.sleep(0.5)
    raise SystemExit(f"try: not ready within {READY_TIMEOUT_S} s; see serve's log")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/try", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep-running", action="store_true", help="leave serve running at the end (^C stops it)"
    )
    parser.add_argument("--short", action="store_true", help="one bench level (the tests' run)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    python, bench_python = ensure_venvs()
    say(f"venvs ready in {time.monotonic() - started:.1f} s")
    work = WORK / time.strftime("%Y%m%dT%H%M%S")
    work.mkdir(parents=True)
    (work / "model").mkdir()
    config = write_config(work, python, bench_python)
    say(f"configuration {config}:")
    print(config.read_text(), end="", flush=True)
    log_path = work / "serve.log"
    say(f"glm5svc serve (the test engine on 127.0.0.1), its log: {log_path}")
    serve_started = time.monotonic()  # "ready after" counts serve's start, not the venvs
    with log_path.open("w") as log:
        serve = spawn(
            [str(python), "-m", "glm5svc", "--config", str(config), "serve"],
            die_with_parent=False, cwd=REPO, env=_env(config), stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        status = wait_ready(python, config, serve)
        say(f"ready after {time.monotonic() - serve_started:.1f} s; glm5svc status:")
        print(status.stdout, end="", flush=True)
        command = link_command(python)
        say(f"glm5svc from any folder: export PATH={shlex.quote(str(command.parent))}:$PATH "
            f"GLM5SVC_CONFIG={shlex.quote(str(config))}")  # fmt: skip
        # The configuration sizes the bench: a plain `glm5svc bench` runs the same ladder.
        bench_args = ["bench", "--ladder", str(LADDER[0])] if args.short else ["bench"]
        say(shlex.join([str(python), "-m", "glm5svc", "--config", str(config), *bench_args]))
        bench = glm5svc(python, config, *bench_args)
        if bench.returncode != 0:
            raise SystemExit(f"try: glm5svc bench exited with {bench.returncode}")
        say(
            "a tune sized to this machine, once serve is stopped (it starts its own engines on "
            f"the same port): {shlex.join(tune_command())}"
        )
        if args.keep_running:
            say(f"serve keeps running (pid {serve.pid}); ^C stops it")
            serve.wait(None)
    except KeyboardInterrupt:
        pass
    finally:
        if serve.poll() is None:
            say("stopping serve (SIGTERM, as systemd does)")
        code = serve.stop(STOP_TIMEOUT_S).returncode
    after = glm5svc(python, config, "status", capture_output=True)
    say(f"serve exited with {code}; glm5svc status now exits {after.returncode} (3: not running)")
    say(f"done in {time.monotonic() - started:.1f} s; everything is in {work}")
    return 0 if code == 0 and after.returncode == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
