"""Runs the real-engine scenarios on the GPU machine; everything it measures goes to $OUT.

Started there by `scripts/gpu-lab remote SCENARIO` from the repository root, with
`.gpu-lab/` (the package archive from `scripts/gpu-lab prepare`) carried along. Each
scenario has a hard deadline well inside the device tool's 10 minutes per command and
writes results.json whatever happens, plus one .tar.gz of the logs and recordings.

Scenarios:
- service: a bare sglang server and `glm5svc serve` side by side on one GPU (same argv,
  other ports), interleaved bench_serving runs (the supervision cost as a ratio from one
  run), READY latency after the engine's "fired up" line, recordings (/metrics text,
  /health_generate under load, server logs, bench_serving output), `glm5svc bench`
  over a ladder with telemetry, the drain under load, kill -9 of the scheduler under
  load, `glm5svc preflight` with the H200 configuration.
- nsa: GLM-5's architecture, scaled down, with FP8 KV cache and radix cache
  (lab/gpu/nsa_scenario.py).

Longer than 400 lines: the scenarios of one device run share its deadlines, recording
and archive helpers; each scenario is one function.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from lab.gpu import nsa_scenario

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
    if not archive.exists() and "GPU_LAB_ENGINE" in os.environ:
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
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
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
        return group_members(self.proc.pid)

    def signal_leader(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def finish(self, timeout: float = 30) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            return self.proc.wait(timeout=10)
        finally:
            self._reader.join(timeout=5)
            self._log.close()


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


# Every process group this run started (servers and the engines they start), so that the
# end of a run kills exactly these and nothing else on the machine.
STARTED_GROUPS: set[int] = set()


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
        f"{pid} {_read(Path('/proc', str(pid), 'cmdline'))[:120]}"
        for g in groups
        for pid in group_members(g)
    ]


def http_get(url: str, timeout: float = 10) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace"), time.monotonic() - t0
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), time.monotonic() - t0
    except (OSError, urllib.error.URLError) as err:
        return 0, str(err), time.monotonic() - t0


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
    """sglang's own gauge of requests being decoded (`sglang:num_running_reqs`)."""
    _, text, _ = http_get(f"{engine_url}/metrics", timeout=5)
    match = re.search(r"^sglang:num_running_reqs\{[^}]*\} ([0-9.e+]+)", text, re.M)
    return int(float(match.group(1))) if match else 0


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
    argv = [
        BENCH_PYTHON,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        base_url,
        "--model",
        str(model_dir),
        "--tokenizer",
        str(model_dir),
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
        "--warmup-requests",
        "0",
        "--disable-tqdm",
        "--seed",
        "1",
        "--output-file",
        str(out_file),
    ]
    before = out_file.read_text().count("\n") if out_file.exists() else 0
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"bench_serving ran past {timeout} s", "wall_s": time.monotonic() - t0}
    lines = out_file.read_text().splitlines() if out_file.exists() else []
    if done.returncode != 0 or len(lines) <= before:
        return {
            "error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-800:]}",
            "wall_s": time.monotonic() - t0,
        }
    record = json.loads(lines[-1])
    keep = (
        "completed",
        "duration",
        "total_throughput",
        "output_throughput",
        "median_ttft_ms",
        "mean_itl_ms",
        "concurrency",
    )
    return {k: record.get(k) for k in keep} | {"wall_s": time.monotonic() - t0}


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
    """Stops a bare server the way sglang stops cleanly: SIGTERM to the launcher only."""
    t0 = time.monotonic()
    process.signal_leader(signal.SIGTERM)
    try:
        code = process.proc.wait(timeout=timeout)
        killed = False
    except subprocess.TimeoutExpired:
        process.kill_group()
        code = process.proc.wait(timeout=10)
        killed = True
    deadline = time.monotonic() + 10
    while process.group_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = process.group_pids()
    process.finish(timeout=5)
    return {
        "exit": code,
        "seconds": round(time.monotonic() - t0, 2),
        "group_killed": killed,
        "left": len(left),
    }


def scenario_service(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    model = MODELS / "llama-tiny"
    config = write_h200_config(out / "h200.yaml", model, out / "results")
    results["config"] = config.read_text()
    recorded = out / "recorded"
    recorded.mkdir(exist_ok=True)

    pre = run_glm5svc(config, env, "preflight")
    (recorded / "preflight.txt").write_text(pre.stdout + pre.stderr)
    results["preflight"] = {"exit": pre.returncode, "tail": (pre.stdout + pre.stderr)[-3000:]}
    if pre.returncode != 0:
        # Recorded above as a finding; the rest of the scenario still needs a server.
        settings = yaml.safe_load(config.read_text())
        settings["service"]["run_preflight"] = False
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        results["preflight"]["serve_without_preflight"] = True
    plan = run_glm5svc(config, env, "command", "--explain")
    (recorded / "command-explain.txt").write_text(plan.stdout + plan.stderr)

    notify = NotifySocket(out / "notify.sock")
    serve_env = dict(env, NOTIFY_SOCKET=str(notify.path))
    serve_argv = glm5svc_argv(config, "serve")
    serve = Process("serve", serve_argv, serve_env, recorded)
    bare_argv, bare_env = plan_launch(config, env, BARE_PORT)
    bare = Process("bare", bare_argv, bare_env, recorded)
    fired_bare = bare.wait_for(FIRED_UP, Deadline(min(300, deadline.left())))
    fired_serve = serve.wait_for(FIRED_UP, Deadline(min(120, deadline.left())))
    ready_deadline = Deadline(min(60, deadline.left()))
    while (
        notify.first("READY=1") is None
        and not ready_deadline.expired()
        and serve.proc.poll() is None
    ):
        time.sleep(0.05)
    ready = notify.first("READY=1")
    results["start"] = {
        "bare_fired_up_s": fired_bare and round(fired_bare - bare.started, 1),
        "serve_fired_up_s": fired_serve and round(fired_serve - serve.started, 1),
        "serve_ready_s": ready and round(ready - serve.started, 1),
        "ready_after_fired_up_s": (ready and fired_serve) and round(ready - fired_serve, 3),
    }
    log(f"start: {results['start']}")
    if not (fired_bare and ready):
        results["error"] = "a server did not come up"
        for p in (serve, bare):
            p.kill_group()
            p.finish(timeout=5)
        return

    status, text, _ = http_get(f"http://127.0.0.1:{ENGINE_PORT}/metrics")
    (recorded / "metrics-idle.txt").write_text(text)
    engine = f"http://127.0.0.1:{ENGINE_PORT}"
    bare_url = f"http://127.0.0.1:{BARE_PORT}"
    bench_file = recorded / "bench_serving.jsonl"

    # Recordings under load: /metrics and /health_generate while bench_serving runs.
    under_load = {}

    def sample_under_load():
        # bench_serving needs ~10 s to import before its first request: wait for the load.
        waiting = Deadline(40)
        while running_requests(engine) < 8 and not waiting.expired():
            time.sleep(0.2)
        _, metrics_text, _ = http_get(f"{engine}/metrics")
        (recorded / "metrics-under-load.txt").write_text(metrics_text)
        probes = []
        for _ in range(5):
            code, body, seconds = http_get(f"{engine}/health_generate", timeout=30)
            probes.append({"status": code, "seconds": round(seconds, 3), "body": body[:200]})
            time.sleep(0.3)
        under_load["health_generate"] = probes
        _, status_text, _ = http_get(f"http://127.0.0.1:{LISTEN_PORT}/status")
        (recorded / "status-under-load.json").write_text(status_text)
        for path in ("readyz", "livez"):
            under_load[path] = http_get(f"http://127.0.0.1:{LISTEN_PORT}/{path}")[:2]
        _, service_metrics, _ = http_get(f"http://127.0.0.1:{LISTEN_PORT}/metrics")
        (recorded / "service-metrics-under-load.txt").write_text(service_metrics)

    sampler = threading.Thread(target=sample_under_load)
    sampler.start()
    load_prompts = int(os.environ.get("GPU_LAB_LOAD_PROMPTS", "512"))
    bench_serving(env, engine, model, 64, load_prompts, 256, 512, bench_file, 120)
    sampler.join(timeout=60)
    results["under_load"] = under_load

    # glm5svc bench over a ladder, telemetry per level.
    if deadline.left() > 300:
        ladder = run_glm5svc(
            config,
            env,
            "bench",
            "--python",
            BENCH_PYTHON,
            "--ladder",
            "16",
            "32",
            "64",
            "128",
            "--input-len",
            "256",
            "--output-len",
            "128",
            "--num-prompts",
            "256",
            "--json",
            timeout=min(200, deadline.left() - 100),
        )
        (recorded / "glm5svc-bench.txt").write_text(ladder.stdout[-20000:] + ladder.stderr[-20000:])
        results["ladder"] = {"exit": ladder.returncode}
        try:
            results["ladder"]["summary"] = json.loads(ladder.stdout)
        except json.JSONDecodeError:
            results["ladder"]["tail"] = (ladder.stdout + ladder.stderr)[-3000:]

    # Supervision cost: the same workload against both, alternating which goes first.
    ratio_runs = []
    reps = int(os.environ.get("GPU_LAB_REPS", "3"))
    for rep in range(reps):
        for concurrency in (16, 64):
            order = [("bare", bare_url), ("serve", engine)]
            if rep % 2:
                order.reverse()
            for label, url in order:
                if deadline.left() < 140:  # kept for the drain and kill -9
                    break
                figures = bench_serving(
                    env, url, model, concurrency, concurrency * 16, 256, 128, bench_file, 120
                )
                # bench_serving's own "concurrency" (the measured mean) stays in figures
                ratio_runs.append({**figures, "target": label, "level": concurrency, "rep": rep})
                log(f"{label} c={concurrency}: {figures.get('total_throughput')}")
    results["ratio_runs"] = ratio_runs

    results["bare_stop"] = stop_gracefully(bare, 60)

    # The drain under load: every request in flight when the stop comes.
    results["drain"] = stop_under_load(serve, notify, deadline)
    log(f"drain: {results['drain']}")

    # kill -9 of the scheduler under load.
    if deadline.left() > 120:
        results["kill_scheduler"] = kill_scheduler_under_load(config, env, recorded, deadline)


def start_serve(name: str, config: Path, env: dict[str, str], recorded: Path, wait_s: float):
    """`glm5svc serve` with a notify socket of its own, waited on until READY=1 (or not)."""
    notify = NotifySocket(recorded.parent / f"notify-{name}.sock")
    argv = glm5svc_argv(config, "serve")
    serve = Process(name, argv, dict(env, NOTIFY_SOCKET=str(notify.path)), recorded)
    wait = Deadline(wait_s)
    while notify.first("READY=1") is None and not wait.expired() and serve.proc.poll() is None:
        time.sleep(0.1)
    return serve, notify


def kill_scheduler_under_load(
    config: Path, env: dict[str, str], recorded: Path, deadline: Deadline
) -> dict:
    serve, notify = start_serve(
        "serve-kill9", config, env, recorded, min(150, deadline.left() - 40)
    )
    outcome: dict = {"ready": notify.first("READY=1") is not None}
    if not outcome["ready"]:
        serve.kill_group()
        serve.finish(timeout=5)
        return outcome
    load = Load(f"http://127.0.0.1:{ENGINE_PORT}", requests=32, output_len=1000)
    load.wait_running(24, Deadline(30))
    engine_pgid = engine_group(serve)
    members = group_members(engine_pgid) if engine_pgid else []
    # sglang names its scheduler process "sglang::scheduler..." (setproctitle); the test
    # engine's rank process stands in for it in a CPU rehearsal.
    schedulers = [
        pid for pid in members if "scheduler" in _read(Path("/proc", str(pid), "cmdline"))
    ]
    schedulers = schedulers or [pid for pid in members if pid != engine_pgid][:1]
    outcome["scheduler_pids"] = schedulers
    t_kill = time.monotonic()
    for pid in schedulers:
        os.kill(pid, signal.SIGKILL)
    try:
        outcome["serve_exit"] = serve.proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        outcome["serve_exit"] = "timeout"
        serve.kill_group()
    outcome["seconds_to_exit"] = round(time.monotonic() - t_kill, 2)
    outcome["requests"] = load.summary()
    time.sleep(2)
    outcome["processes_left"] = processes_left(serve)
    serve.finish(timeout=5)
    outcome["serve_tail"] = [line for _, line in serve.lines[-25:]]
    outcome["notify"] = [m for _, m in notify.messages[-10:]]
    return outcome


def _read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def generate(engine_url: str, input_ids: list[int], max_new_tokens: int, timeout: float) -> dict:
    """One /generate request; what came back (status, tokens) or why not."""
    sampling = {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0}
    body = json.dumps({"input_ids": input_ids, "sampling_params": sampling}).encode()
    request = urllib.request.Request(
        f"{engine_url}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            meta = json.loads(reply.read()).get("meta_info", {})
            return {"status": reply.status, "tokens": meta.get("completion_tokens", 0),
                    "seconds": time.monotonic() - t0}  # fmt: skip
    except urllib.error.HTTPError as err:
        return {"status": err.code, "tokens": 0, "seconds": time.monotonic() - t0}
    except (OSError, ValueError) as err:
        return {"status": 0, "error": str(err)[:120], "tokens": 0, "seconds": time.monotonic() - t0}


class Load:
    """Requests of a fixed length sent at once from threads (no client start-up delay, unlike
    bench_serving's ~15 s of imports), each reporting how it ended."""

    def __init__(self, engine_url: str, requests: int, output_len: int, first_id: int = 0):
        self.engine_url, self.output_len = engine_url, output_len
        self.replies: list[dict] = []
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._one, args=(first_id + i,)) for i in range(requests)
        ]
        for thread in self.threads:
            thread.start()

    def _one(self, index: int) -> None:
        ids = [(index * 7919 + k * 104729) % 2000 + 4 for k in range(256)]
        reply = generate(self.engine_url, ids, self.output_len, timeout=120)
        with self._lock:
            self.replies.append(reply)

    def wait_running(self, at_least: int, deadline: Deadline) -> int:
        """Until sglang's own gauge shows that many requests running (or the deadline)."""
        while (running := running_requests(self.engine_url)) < at_least and not deadline.expired():
            time.sleep(0.1)
        return running

    def summary(self, join_s: float = 10) -> dict:
        for thread in self.threads:
            thread.join(timeout=join_s)
        full = [r for r in self.replies if r["status"] == 200 and r["tokens"] == self.output_len]
        return {
            "sent": len(self.threads),
            "completed_in_full": len(full),
            "failed": len(self.threads) - len(full),
            "statuses": sorted({str(r["status"]) for r in self.replies}),
            "errors": sorted({r.get("error", "") for r in self.replies} - {""})[:3],
            "max_seconds": round(max((r["seconds"] for r in self.replies), default=0), 2),
        }


def stop_under_load(serve: Process, notify: NotifySocket, deadline: Deadline) -> dict:
    """Stop `glm5svc serve` with 64 requests in flight by sglang's own gauge, send 8 more
    after the stop: what completes, what fails, how long, what is left."""
    engine = f"http://127.0.0.1:{ENGINE_PORT}"
    output_len = int(os.environ.get("GPU_LAB_DRAIN_TOKENS", "2000"))
    in_flight = Load(engine, requests=64, output_len=output_len)
    result: dict = {"running_at_stop": in_flight.wait_running(60, Deadline(30))}
    t_stop = time.monotonic()
    serve.signal_leader(signal.SIGTERM)
    time.sleep(0.3)
    result["readyz_0_3s_after_stop"] = http_get(f"http://127.0.0.1:{LISTEN_PORT}/readyz", 2)[0]
    after_stop = Load(engine, requests=8, output_len=output_len, first_id=1000)
    try:
        result["serve_exit"] = serve.proc.wait(timeout=min(120, max(5, deadline.left() - 15)))
    except subprocess.TimeoutExpired:
        result["serve_exit"] = "timeout"
        serve.kill_group()
    result["stop_seconds"] = round(time.monotonic() - t_stop, 2)
    result["in_flight"] = in_flight.summary()
    result["sent_after_stop"] = after_stop.summary()
    time.sleep(1)
    result["processes_left"] = processes_left(serve)
    serve.finish(timeout=5)
    result["drain_log"] = [line for _, line in serve.lines if "glm5svc:" in line][-8:]
    result["notify"] = [m for _, m in notify.messages[-6:]]
    return result


def scenario_drain(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    """`glm5svc serve` started alone, then stopped under load (stop_under_load)."""
    config = write_h200_config(out / "h200.yaml", MODELS / "llama-tiny", out / "results")
    recorded = out / "recorded"
    recorded.mkdir(exist_ok=True)
    serve, notify = start_serve("serve-drain", config, env, recorded, max(10, deadline.left() - 60))
    ready, fired = notify.first("READY=1"), serve.first_time(FIRED_UP)
    results["ready_s"] = ready and round(ready - serve.started, 1)
    results["ready_after_fired_up_s"] = round(ready - fired, 3) if ready and fired else None
    if ready is None:
        serve.kill_group()
        serve.finish(timeout=5)
        results["error"] = "serve did not become ready"
        return
    results.update(stop_under_load(serve, notify, deadline))
    shown = ("running_at_stop", "in_flight", "stop_seconds", "processes_left")
    log(f"drain: {json.dumps({key: results[key] for key in shown})}")


def scenario_nsa(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    results["nsa"] = nsa_scenario.run(
        python=sys.executable,
        site=SITE,
        model_dir=MODELS / "glm5-tiny",
        out=out / "recorded",
        env=env,
        budget_s=deadline.left() - 20,
    )


SCENARIOS = {"service": scenario_service, "drain": scenario_drain, "nsa": scenario_nsa}


def main() -> None:
    parser = argparse.ArgumentParser(description="real-engine scenarios on the GPU machine")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    parser.add_argument("--budget", type=float, default=560, help="seconds for all scenarios")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", LAB / "out"))
    out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(args.budget)
    results: dict = {}
    try:
        unpack_site()
        env = base_env()
        results["machine"] = machine_facts(env)
        log(f"machine: {results['machine']}")
        subprocess.run(
            [BENCH_PYTHON, str(REPO / "lab/gpu/models.py"), str(MODELS)], env=env, check=True
        )
        for name in args.scenarios:
            results[name] = {}
            try:
                SCENARIOS[name](out, env, deadline, results[name])
            except Exception as err:  # noqa: BLE001 - the run must still write what it saw
                results[name]["error"] = f"{type(err).__name__}: {err}"
                log(f"{name} failed: {err!r}")
    finally:
        for group in STARTED_GROUPS:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        recorded = out / "recorded"
        if recorded.exists():
            with tarfile.open(out / "recorded.tar.gz", "w:gz") as tar:
                tar.add(recorded, arcname="recorded")
            for path in sorted(recorded.iterdir()):
                path.unlink() if path.is_file() else None
            recorded.rmdir() if not any(recorded.iterdir()) else None
        for sock in out.glob("*.sock"):
            sock.unlink()
        for path in out.glob("*.yaml"):
            path.unlink()
        log(f"results in {out}")


if __name__ == "__main__":
    main()
