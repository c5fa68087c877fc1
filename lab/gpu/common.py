"""What the GPU lab's scenarios share: the machine's paths and environment, processes in
their own groups (every group this run started is killed at its end), HTTP and sd_notify,
bench_serving, the H200 configuration and the launch plan's bare twin.

Longer than 400 lines: the helper layer of every scenario that starts servers (process
groups, deadlines, recording) kept in one place so that a run kills what it started.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import yaml

from glm5svc.child_group import live_group_members, spawn
from glm5svc.http_fetch import FetchError, fetch_bytes, fetch_text
from glm5svc.metrics_text import MetricsTextError, parse_metrics

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / ".gpu-lab"
SITE = LAB / "site"
MODELS = LAB / "models"
CUDA_HOME = Path("/usr/local/cuda-13.0")
# NVLink multicast stays off on the lent machines: a program that uses it can take the
# host's shared GPUs out of service.
NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
FIRED_UP = "The server is fired up and ready to roll!"
KV_POOL_ALLOCATED = "KV Cache is allocated"
_KV_POOL = re.compile(r"KV Cache is allocated\. #tokens: (\d+)")
ENGINE_PORT, BARE_PORT, LISTEN_PORT = 30000, 30001, 9400
# A CPU rehearsal (tests) swaps the engine and bench_serving's interpreter:
# GPU_LAB_ENGINE="python testkit/sglang_test_engine.py", GPU_LAB_BENCH_PYTHON=<venv python>.
ENGINE_COMMAND = os.environ.get("GPU_LAB_ENGINE", "").split() or [
    sys.executable,
    "-m",
    "sglang.launch_server",
]
BENCH_PYTHON = os.environ.get("GPU_LAB_BENCH_PYTHON", sys.executable)
EXAMPLE_CONFIG = REPO / "glm5svc" / "data" / "examples" / "h200-llama-tiny.yaml"


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0


def log(text: str) -> None:
    print(f"[gpu-lab {time.strftime('%H:%M:%S')}] {text}", flush=True)


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(NVLS_OFF)
    env.update(OFFLINE)
    env["CUDA_HOME"] = str(CUDA_HOME)
    env["PYTHONPATH"] = f"{SITE}:{REPO}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def unpack_site() -> None:
    archive = LAB / "site.tar.xz"
    if "GPU_LAB_ENGINE" in os.environ:  # a CPU rehearsal: the dev venv has what it needs
        return
    marker = SITE / ".unpacked-from"
    stamp = f"{archive.stat().st_size}:{archive.stat().st_mtime_ns}"
    if marker.exists() and marker.read_text() == stamp:
        return
    t0 = time.monotonic()
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(SITE, filter="tar")
    marker.write_text(stamp)
    log(f"unpacked {archive} in {time.monotonic() - t0:.1f} s")


def machine_facts(env: dict[str, str]) -> dict:
    query = "name,driver_version,memory.total,power.limit,compute_cap"
    try:
        smi = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except FileNotFoundError:
        smi = "no nvidia-smi"
    versions = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.metadata as m, torch, sys;"
            "print(sys.version.split()[0], torch.__version__,"
            " *[m.version(p) for p in"
            " ('sglang', 'flashinfer-python', 'sglang-kernel', 'transformers')])",
        ],
        env=env,
        capture_output=True,
        text=True,
    ).stdout.split()
    keys = ["python", "torch", "sglang", "flashinfer_python", "sglang_kernel", "transformers"]
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpus": [line.strip() for line in smi.splitlines()],
        "cuda_home": str(CUDA_HOME),
        **dict(zip(keys, versions, strict=False)),
    }


class Process:
    """A child in its own process group whose output is timestamped into a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], out: Path):
        self.name = name
        self.log_path = out / f"{name}.log"
        self.lines: list[tuple[float, str]] = []
        self._log = self.log_path.open("w")
        self.group = spawn(
            argv,
            die_with_parent=False,  # the run's end kills STARTED_GROUPS
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        self.proc = self.group.popen
        self.started = time.monotonic()
        STARTED_GROUPS.add(self.proc.pid)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            now = time.monotonic()
            self.lines.append((now, line.rstrip("\n")))
            self._log.write(f"{now - self.started:9.3f} {line}")
            self._log.flush()

    def first_time(self, pattern: str) -> float | None:
        for t, line in list(self.lines):
            if pattern in line:
                return t
        return None

    def wait_for(self, pattern: str, deadline: Deadline) -> float | None:
        while not deadline.expired():
            t = self.first_time(pattern)
            if t is not None:
                return t
            if self.proc.poll() is not None:
                return None
            time.sleep(0.1)
        return None

    def group_pids(self) -> list[int]:
        return self.group.members()

    def signal_leader(self, sig: int) -> None:
        self.group.signal_leader(sig)

    def kill_group(self) -> None:
        self.group.send_kill()

    def finish(self, timeout: float = 30) -> int | None:
        try:
            code = self.group.wait(timeout)
            return code if code is not None else self.group.kill().returncode
        finally:
            self._reader.join(timeout=5)
            self._log.close()


# Every process group this run started (servers and the engines they start), so that the
# end of a run kills exactly these and nothing else on the machine.
STARTED_GROUPS: set[int] = set()


def kv_pool_tokens(process: Process) -> int | None:
    """The token count of the KV pool the server allocated, from its log."""
    for _, line in list(process.lines):
        match = _KV_POOL.search(line)
        if match:
            return int(match.group(1))
    return None


def engine_group(process: Process) -> int | None:
    """The engine's process group, from serve's "started the server, pid N (process group M)"."""
    for _, line in list(process.lines):
        match = re.search(r"started the server, pid \d+ \(process group (\d+)\)", line)
        if match:
            STARTED_GROUPS.add(int(match.group(1)))
            return int(match.group(1))
    return None


def processes_left(process: Process) -> list[str]:
    """What is still alive of a server: its own group and, for serve, its engine's."""
    groups = {process.proc.pid, engine_group(process)} - {None}
    return [
        f"{pid} {proc_text(Path('/proc', str(pid), 'cmdline'))[:120]}"
        for g in groups
        for pid in live_group_members(g)
    ]


def http_get(url: str, timeout: float = 10) -> tuple[int, str, float]:
    """(HTTP status, body, seconds); status 0 and the cause when nothing answered."""
    t0 = time.monotonic()
    try:
        status, body = fetch_bytes(url, timeout_s=timeout)
        return status, body.decode(errors="replace"), time.monotonic() - t0
    except FetchError as err:
        if err.status is not None:
            return err.status, err.body.decode(errors="replace"), time.monotonic() - t0
        return 0, err.cause, time.monotonic() - t0


class NotifySocket:
    """The systemd side of sd_notify: records each datagram with its arrival time."""

    def __init__(self, path: Path):
        path.unlink(missing_ok=True)
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode(errors="replace")))

    def first(self, text: str) -> float | None:
        for t, message in list(self.messages):
            if text in message.split("\n"):
                return t
        return None


def running_requests(engine_url: str) -> int:
    """sglang's own gauge of requests being decoded (`sglang:num_running_reqs`), summed
    over ranks; 0 when the engine does not answer."""
    try:
        text = fetch_text(f"{engine_url}/metrics", timeout_s=5)
        return int(parse_metrics(text).total("sglang:num_running_reqs") or 0)
    except (FetchError, MetricsTextError):
        return 0


BENCH_FIGURES = (
    "completed",
    "duration",
    "total_throughput",
    "output_throughput",
    "median_ttft_ms",
    "mean_itl_ms",
    "concurrency",
)


def bench_serving_args(
    base_url: str,
    model_dir: Path,
    concurrency: int,
    prompts: int,
    input_len: int,
    output_len: int,
    out_file: Path,
    seed: int = 1,
) -> list[str]:
    """bench_serving's arguments (after `-m sglang.bench_serving`): random token ids of a
    fixed length (`random` wants the ShareGPT file, which cannot be downloaded there)."""
    return [
        "--backend", "sglang", "--base-url", base_url,
        "--model", str(model_dir), "--tokenizer", str(model_dir),
        "--dataset-name", "random-ids",
        "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "1.0",
        "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
        "--warmup-requests", "0", "--disable-tqdm", "--seed", str(seed),
        "--output-file", str(out_file),
    ]  # fmt: skip


def bench_figures(out_file: Path, lines_before: int) -> dict | None:
    """The figures of the run that appended a line to bench_serving's output file."""
    lines = out_file.read_text().splitlines() if out_file.exists() else []
    if len(lines) <= lines_before:
        return None
    record = json.loads(lines[-1])
    return {k: record.get(k) for k in BENCH_FIGURES}


def bench_serving(
    env,
    base_url: str,
    model_dir: Path,
    concurrency: int,
    prompts: int,
    input_len: int,
    output_len: int,
    out_file: Path,
    timeout: float,
) -> dict:
    argv = [BENCH_PYTHON, "-m", "sglang.bench_serving"] + bench_serving_args(
        base_url, model_dir, concurrency, prompts, input_len, output_len, out_file
    )
    before = out_file.read_text().count("\n") if out_file.exists() else 0
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"bench_serving ran past {timeout} s", "wall_s": time.monotonic() - t0}
    figures = bench_figures(out_file, before)
    if done.returncode != 0 or figures is None:
        return {
            "error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-800:]}",
            "wall_s": time.monotonic() - t0,
        }
    return figures | {"wall_s": time.monotonic() - t0}


def write_h200_config(
    dest: Path, model_dir: Path, results: Path, drain_timeout_s: int = 60
) -> Path:
    """The shipped H200 example (glm5svc/data/examples/h200-llama-tiny.yaml) with this
    machine's paths: the lab runs the configuration users are given, not a copy of it."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config["model"]["path"] = str(model_dir)
    server = config["server"]
    server["python"] = sys.executable
    server["env"]["PYTHONPATH"] = f"{SITE}:{REPO}"
    if "GPU_LAB_ENGINE" in os.environ:  # a CPU rehearsal: no GPU, no sglang to check
        server["command"] = ENGINE_COMMAND
        config.setdefault("service", {})["run_preflight"] = False
    # Two servers share the GPU during the comparison: both get the same share.
    config.setdefault("tuning", {})["mem_fraction_static"] = 0.35
    service = config.setdefault("service", {})
    service.update(results_dir=str(results), drain_timeout_s=drain_timeout_s, probe_interval_s=2)
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def glm5svc_argv(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "glm5svc", "--config", str(config), *args]


def run_glm5svc(config: Path, env: dict[str, str], *args: str, timeout: float = 120):
    """A glm5svc command with this run's configuration, its output captured."""
    return subprocess.run(
        glm5svc_argv(config, *args), env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def plan_launch(config: Path, env: dict[str, str], port: int) -> tuple[list[str], dict[str, str]]:
    """The server the service's plan starts (argv and environment), on another port: the
    bare side of the comparison."""
    plan = run_glm5svc(config, env, "command", "--json")
    plan.check_returncode()
    summary = json.loads(plan.stdout)
    argv = summary["argv"]
    argv[argv.index("--port") + 1] = str(port)
    # server.env values are shown as a placeholder by the plan: take them from the config.
    launch_env = dict(env, **yaml.safe_load(config.read_text())["server"]["env"])
    launch_env.update({k: v for k, v in summary["env"].items() if k not in launch_env})
    return argv, launch_env


def stop_gracefully(process: Process, timeout: float) -> dict:
    """Stops a bare server the way sglang stops cleanly: SIGTERM to the launcher only, the
    group killed if it has not emptied within `timeout`."""
    outcome = process.group.stop(timeout)
    process.finish(timeout=5)
    return {
        "exit": outcome.returncode,
        "seconds": round(outcome.waited_s, 2),
        "group_killed": outcome.needed_kill,
        "left": len(outcome.survivor_pids),
        "outcome": outcome.kind,
    }


def start_serve(name: str, config: Path, env: dict[str, str], recorded: Path, wait_s: float):
    """`glm5svc serve` with a notify socket of its own, waited on until READY=1 (or not)."""
    notify = NotifySocket(recorded.parent / f"notify-{name}.sock")
    argv = glm5svc_argv(config, "serve")
    serve = Process(name, argv, dict(env, NOTIFY_SOCKET=str(notify.path)), recorded)
    wait = Deadline(wait_s)
    while notify.first("READY=1") is None and not wait.expired() and serve.proc.poll() is None:
        time.sleep(0.1)
    return serve, notify


def proc_text(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
