"""Runs the real-engine scenarios on the GPU machine; everything it measures goes to $OUT.

Started there by `scripts/gpu-lab remote SCENARIO` from the repository root, with
`.gpu-lab/` (the package archive from `scripts/gpu-lab prepare`) carried along. Each
scenario has a hard deadline well inside the device tool's 10 minutes per command and
writes results.json whatever happens, plus one .tar.gz of the logs and recordings.

Scenarios:
- service: a bare sglang server and `glm5svc serve` started on one GPU (same argv, other
  ports; serve once bare's KV pool is allocated), their start times and READY after the
  engine's "fired up" line, then bare stopped; recordings (/metrics text,
  /health_generate under load, server logs, bench_serving output), `glm5svc bench`
  over a ladder with telemetry, the drain under load, kill -9 of the scheduler under
  load, `glm5svc preflight` with the H200 configuration.
- nsa: GLM-5's architecture, scaled down, with FP8 KV cache and radix cache
  (lab/gpu/nsa_scenario.py).
- ratio: the supervised/bare throughput ratio on the qwen3-moe testbed, by pairs of runs
  until its 95 % interval is within 1 % (lab/gpu/ratio_scenario.py).
- tune: `glm5svc tune run` on the qwen3-moe testbed from a starting point
  (lab/gpu/tune_scenario.py).
- precision: the spread of windows against their length and of one setting from start to
  start, every counter read recorded (lab/gpu/precision_scenario.py).
- noise: fixed-cap windows in two or three starts with every second recorded beside them
  (clocks, power, the engine's gauges, the load's pacing) and a variant that removes a
  suspected cause (lab/gpu/noise_scenario.py).
- grid: the tune's space exhaustively, one engine start per combination of its restart
  knobs (started again in turn), every live value in each (lab/gpu/tune_scenario.py).

Longer than 400 lines: the scenarios of one device run share its deadlines, recording
and archive helpers; each scenario is one function.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import yaml

from glm5svc.child_group import live_group_members
from glm5svc.http_fetch import FetchError, post_json
from lab.gpu import method_scenario, nsa_scenario, peer_scenario, ratio_scenario, tune_scenario
from lab.gpu.common import (
    BARE_PORT,
    BENCH_PYTHON,
    ENGINE_PORT,
    FIRED_UP,
    KV_POOL_ALLOCATED,
    LAB,
    LISTEN_PORT,
    MODELS,
    REPO,
    SITE,
    STARTED_GROUPS,
    Deadline,
    NotifySocket,
    Process,
    base_env,
    bench_serving,
    engine_group,
    glm5svc_argv,
    http_get,
    kv_pool_tokens,
    log,
    machine_facts,
    plan_launch,
    proc_text,
    processes_left,
    run_glm5svc,
    running_requests,
    start_serve,
    stop_gracefully,
    unpack_site,
    write_h200_config,
)


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
    bare_argv, bare_env = plan_launch(config, env, BARE_PORT)
    bare = Process("bare", bare_argv, bare_env, recorded)
    # sglang sizes its KV pool as mem_fraction_static of the memory free before its own
    # weights load, less what is used by then: a server whose pre-load reading comes before
    # the other's pool is allocated and whose post-load reading comes after gets a negative
    # pool ("Not enough memory"). So serve starts once bare's pool is allocated.
    bare.wait_for(KV_POOL_ALLOCATED, Deadline(min(200, deadline.left())))
    serve = Process("serve", serve_argv, serve_env, recorded)
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
        "kv_pool_tokens": {p.name: kv_pool_tokens(p) for p in (bare, serve)},
    }
    log(f"start: {results['start']}")
    if not (fired_bare and ready):
        results["error"] = "a server did not come up"
        for p in (serve, bare):
            p.kill_group()
            p.finish(timeout=5)
            results[f"{p.name}_log_tail"] = [line for _, line in p.lines[-60:]]
        return

    # The bare server was for the start comparison; the supervision cost is the ratio
    # scenario's, by pairs of runs. serve has the GPU to itself from here.
    results["bare_stop"] = stop_gracefully(bare, 60)

    status, text, _ = http_get(f"http://127.0.0.1:{ENGINE_PORT}/metrics")
    (recorded / "metrics-idle.txt").write_text(text)
    engine = f"http://127.0.0.1:{ENGINE_PORT}"
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

    # glm5svc bench over a ladder, telemetry per level: 10 s steady windows and at most
    # 40 s of warm-up a level, so two levels fit beside the rest of the scenario.
    if deadline.left() > 300:
        settings = yaml.safe_load(config.read_text())
        settings["benchmark"].update(window_s=10, warmup_max_s=40)
        ladder_config = out / "h200-ladder.yaml"
        ladder_config.write_text(yaml.safe_dump(settings, sort_keys=False))
        ladder_args = ("--ladder", "16", "64", "--input-len", "256", "--output-len", "128")
        summary_path, log_path = recorded / "glm5svc-bench.json", recorded / "glm5svc-bench.log"
        timeout = min(300, deadline.left() - 120)  # kept for the drain and kill -9
        started = time.monotonic()
        # To files, not pipes: a run cut off by its timeout still leaves what it wrote.
        with summary_path.open("w") as summary_out, log_path.open("w") as log_out:
            try:
                ladder = subprocess.run(
                    glm5svc_argv(ladder_config, "bench", "--python", BENCH_PYTHON, *ladder_args,
                                 "--json"),
                    env=env, cwd=REPO, stdout=summary_out, stderr=log_out, timeout=timeout,
                )  # fmt: skip
                results["ladder"] = {"exit": ladder.returncode}
            except subprocess.TimeoutExpired:
                results["ladder"] = {"exit": "timeout", "timeout_s": timeout}
        results["ladder"]["wall_s"] = round(time.monotonic() - started, 1)
        try:
            results["ladder"]["summary"] = json.loads(summary_path.read_text())
        except json.JSONDecodeError:
            results["ladder"]["tail"] = log_path.read_text()[-3000:]
        # The run's folder (per-level logs and records) goes into the archive.
        for run_dir in (out / "results" / "bench").glob("*-sweep"):
            shutil.copytree(run_dir, recorded / "bench" / run_dir.name, dirs_exist_ok=True)

    # The drain under load: every request in flight when the stop comes.
    results["drain"] = stop_under_load(serve, notify, deadline)
    log(f"drain: {results['drain']}")

    # kill -9 of the scheduler under load.
    if deadline.left() > 120:
        results["kill_scheduler"] = kill_scheduler_under_load(config, env, recorded, deadline)


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
    members = live_group_members(engine_pgid) if engine_pgid else []
    # sglang names its scheduler process "sglang::scheduler..." (setproctitle); the test
    # engine's rank process stands in for it in a CPU rehearsal.
    schedulers = [
        pid for pid in members if "scheduler" in proc_text(Path("/proc", str(pid), "cmdline"))
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


def generate(engine_url: str, input_ids: list[int], max_new_tokens: int, timeout: float) -> dict:
    """One /generate request; what came back (status, tokens) or why not."""
    sampling = {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0}
    body = {"input_ids": input_ids, "sampling_params": sampling}
    t0 = time.monotonic()
    try:
        reply = post_json(f"{engine_url}/generate", body, timeout_s=timeout)
        meta = reply.get("meta_info", {}) if isinstance(reply, dict) else {}
        return {"status": 200, "tokens": meta.get("completion_tokens", 0),
                "seconds": time.monotonic() - t0}  # fmt: skip
    except FetchError as err:
        if err.status is not None:
            return {"status": err.status, "tokens": 0, "seconds": time.monotonic() - t0}
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


def scenario_ratio(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    ratio_scenario.run(out, env, deadline, results, MODELS / "qwen3-moe")


TUNE_START = {"start": "before"}  # scripts/gpu-lab remote tune --start before|defaults


def scenario_tune(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    model = MODELS / "qwen3-moe"
    tune_scenario.run(out, env, deadline, results, model, TUNE_START["start"])


def scenario_peer(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    """sglang.auto_benchmark, tier 3, over the tune's space from the same start."""
    peer_scenario.run(out, env, deadline, results, MODELS / "qwen3-moe", TUNE_START["start"])


def scenario_grid(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    tune_scenario.run_grid(out, env, deadline, results, MODELS / "qwen3-moe")


def scenario_precision(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    # Its load and reads run in this process, on glm5svc's dependencies from the unpacked
    # site (the other scenarios run glm5svc in children that get the site on their
    # PYTHONPATH): imported once the site is there.
    sys.path.insert(0, str(SITE))
    from lab.gpu import precision_scenario

    precision_scenario.run(out, env, deadline, results, MODELS / "qwen3-moe")


def scenario_noise(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    # In this process, as precision: glm5svc's dependencies from the unpacked site.
    sys.path.insert(0, str(SITE))
    from lab.gpu import noise_scenario

    noise_scenario.run(out, env, deadline, results, MODELS / "qwen3-moe")


def scenario_method(out: Path, env: dict[str, str], deadline: Deadline, results: dict) -> None:
    method_scenario.run(out, env, deadline, results, MODELS / "qwen3-moe")


# The model each scenario serves (only those are written: a tokenizer takes seconds).
SCENARIO_MODELS = {
    "service": "llama-tiny",
    "drain": "llama-tiny",
    "nsa": "glm5-tiny",
    "ratio": "qwen3-moe",
    "tune": "qwen3-moe",
    "grid": "qwen3-moe",
    "method": "qwen3-moe",
    "peer": "qwen3-moe",
    "precision": "qwen3-moe",
    "noise": "qwen3-moe",
}
SCENARIOS = {
    "service": scenario_service,
    "drain": scenario_drain,
    "nsa": scenario_nsa,
    "ratio": scenario_ratio,
    "tune": scenario_tune,
    "grid": scenario_grid,
    "method": scenario_method,
    "peer": scenario_peer,
    "precision": scenario_precision,
    "noise": scenario_noise,
}


def kill_started_groups() -> None:
    for group in sorted(STARTED_GROUPS):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    STARTED_GROUPS.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description="real-engine scenarios on the GPU machine")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    parser.add_argument("--budget", type=float, default=560, help="seconds for all scenarios")
    parser.add_argument(
        "--start",
        choices=sorted(tune_scenario.STARTS),
        default="before",
        help="tune: the settings the search starts from",
    )
    args = parser.parse_args()
    TUNE_START["start"] = args.start
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
            [BENCH_PYTHON, str(REPO / "lab/gpu/models.py"), str(MODELS)]
            + sorted({SCENARIO_MODELS[name] for name in args.scenarios}),
            env=env,
            check=True,
        )
        for name in args.scenarios:
            results[name] = {}
            try:
                SCENARIOS[name](out, env, deadline, results[name])
            except Exception as err:  # noqa: BLE001 - the run must still write what it saw
                results[name]["error"] = f"{type(err).__name__}: {err}"
                log(f"{name} failed: {err!r}")
                kill_started_groups()  # the next scenario needs the ports and the GPU
    finally:
        kill_started_groups()
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        recorded = out / "recorded"
        if recorded.exists():
            with tarfile.open(out / "recorded.tar.gz", "w:gz") as tar:
                tar.add(recorded, arcname="recorded")
            shutil.rmtree(recorded)
        for sock in out.glob("*.sock"):
            sock.unlink()
        for path in out.glob("*.yaml"):
            path.unlink()
        log(f"results in {out}")


if __name__ == "__main__":
    main()
