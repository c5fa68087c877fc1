#!/usr/bin/env python3
"""Multi-GPU validation of the telemetry sampler: cost across all GPUs, NVLink counters, and
the counters under an NCCL all-reduce (torch.distributed, one process per GPU).

Phases (each writes into the JSON as it finishes; a failed phase keeps the others):
  sample_cost   one whole sample (PynvmlSource.read_sample) for GPUs 0..k-1, k = 1..N, and
                Sampler.sample_now() (all GPUs, with the energy counter)
  nvlink_probe  which NVLink counters NVML answers (field values 138-141, 202, 204, per link
                and aggregated; nvmlDeviceGetNvLinkState) and what one batched read costs
  allreduce     NCCL all-reduce for a fixed count of ops, once with P2P (NVLink or PCIe P2P)
                and once with NCCL_P2P_DISABLE=1 (through host memory: PCIe), with a sampler
                window and NVLink counter deltas around exactly those ops, and
                `glm5svc telemetry --once --json` taken while it runs

    PYTHONPATH=. python3 bench/multi_gpu.py --out results/multi-gpu.json --logs results/
    python -m testkit.with_fake_nvml 2 bench/multi_gpu.py --short   (CI: fake NVML, no torch)

Needs nvidia-ml-py, and torch with CUDA and NCCL for the all-reduce phase.

Longer than 400 lines: a device run is one command; its phases, the all-reduce worker it
starts and the report read in the order they run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.phases import run_phases, write_json  # noqa: E402
from glm5svc.nvml import field_value, text  # noqa: E402
from testkit.engine import free_port  # noqa: E402

UINT_MAX = 0xFFFFFFFF  # field-value scopeId meaning "summed over all links"
NVLINK_FIELDS = {
    "throughput_data_tx_kib": 138,
    "throughput_data_rx_kib": 139,
    "throughput_raw_tx_kib": 140,
    "throughput_raw_rx_kib": 141,
    "count_xmit_bytes": 202,
    "count_rcv_bytes": 204,
}
NVLINK_LINK_COUNT_FIELD = 91
MAX_LINKS = 18  # Hopper: 18 links
MIB = 2**20
# Never let a child use NVLink multicast (NVLS): it can take the host's GPUs out of service.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(call, n: int) -> dict:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return {"n": n, "median_us": percentile(samples, 0.5), "p99_us": percentile(samples, 0.99)}


# -- environment ---------------------------------------------------------------------------


def environment() -> dict:
    env: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            env["gpus"] = [text(pynvml.nvmlDeviceGetName(h)) for h in handles]
            env["gpu_count"] = len(handles)
            env["driver"] = text(pynvml.nvmlSystemGetDriverVersion())
            env["cuda_driver_version"] = pynvml.nvmlSystemGetCudaDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        import importlib.metadata

        env["nvidia_ml_py"] = importlib.metadata.version("nvidia-ml-py")
    except Exception as exc:  # noqa: BLE001 - the JSON says what was missing
        env["nvml_error"] = repr(exc)
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = torch.cuda.is_available()
        nccl = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception as exc:  # noqa: BLE001
        env["torch_error"] = repr(exc)
    return env


# -- sample cost ---------------------------------------------------------------------------


def sample_cost(n: int) -> dict:
    """Whole-sample cost for the first k GPUs, k = 1..N: should grow linearly, <= 1 ms/GPU."""
    from glm5svc.telemetry import PynvmlSource, Sampler

    source = PynvmlSource()
    gpus = source.open()
    result: dict = {"gpu_count": len(gpus), "read_sample_first_k": {}}
    try:
        for i in range(len(gpus)):  # warm every handle first
            source.read_sample(i)
        for k in range(1, len(gpus) + 1):

            def read_k(k=k):
                for i in range(k):
                    source.read_sample(i)

            stat = timed(read_k, n)
            stat["median_us_per_gpu"] = stat["median_us"] / k
            result["read_sample_first_k"][str(k)] = stat
        result["read_sample_per_gpu"] = {
            str(g.index): timed(lambda i=g.index: source.read_sample(i), n) for g in gpus
        }
    finally:
        source.close()
    sampler = Sampler(period_s=1.0, pcie_period_s=0.02)
    if sampler.open():
        try:
            result["sampler_sample_now_all_gpus"] = timed(sampler.sample_now, min(n, 50))
        finally:
            sampler.stop()
    return result


# -- NVLink counters -----------------------------------------------------------------------


def read_nvlink(pynvml, handle, scope: int = UINT_MAX) -> dict:
    """One batched field read of the NVLink counters; None where NVML answers an error."""
    ids = list(NVLINK_FIELDS.values())
    values = pynvml.nvmlDeviceGetFieldValues(handle, [(fid, scope) for fid in ids])
    out = {}
    for name, entry in zip(NVLINK_FIELDS, values, strict=True):
        value = field_value(entry)
        out[name] = int(value) if value is not None else None
        if entry.nvmlReturn != 0:
            out[name + "_error"] = entry.nvmlReturn
    return out


def nvlink_probe(n: int) -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        result = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu: dict = {}
            states = {}
            for link in range(MAX_LINKS):
                try:
                    states[link] = pynvml.nvmlDeviceGetNvLinkState(handle, link)
                except pynvml.NVMLError as exc:
                    states[link] = str(exc)
            gpu["link_states"] = states
            gpu["active_links"] = sum(1 for s in states.values() if s == 1)
            try:
                count = pynvml.nvmlDeviceGetFieldValues(handle, [NVLINK_LINK_COUNT_FIELD])[0]
                gpu["link_count_field"] = count.value.uiVal if count.nvmlReturn == 0 else None
            except pynvml.NVMLError as exc:
                gpu["link_count_field"] = str(exc)
            try:
                gpu["aggregate"] = read_nvlink(pynvml, handle)
                gpu["link0"] = read_nvlink(pynvml, handle, 0)
                gpu["aggregate_read_cost"] = timed(lambda h=handle: read_nvlink(pynvml, h), n)
            except pynvml.NVMLError as exc:
                gpu["field_error"] = str(exc)
            try:
                gpu["utilization_counter_link0"] = pynvml.nvmlDeviceGetNvLinkUtilizationCounter(
                    handle, 0, 0
                )
            except (pynvml.NVMLError, AttributeError) as exc:
                gpu["utilization_counter_link0"] = f"error: {exc}"
            result[str(index)] = gpu
        return result
    finally:
        pynvml.nvmlShutdown()


def nvlink_totals() -> dict[int, dict]:
    import pynvml

    pynvml.nvmlInit()
    try:
        totals = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                totals[i] = read_nvlink(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
            except pynvml.NVMLError as exc:
                totals[i] = {"read_error": str(exc)}
        return totals
    finally:
        pynvml.nvmlShutdown()


def nvlink_delta(before: dict[int, dict], after: dict[int, dict]) -> dict:
    out = {}
    for gpu, values in after.items():
        out[str(gpu)] = {
            name: (value - before[gpu][name])
            if isinstance(value, int) and isinstance(before[gpu].get(name), int)
            else None
            for name, value in values.items()
            if not name.endswith("_error") and gpu in before
        }
    return out


# -- all-reduce ----------------------------------------------------------------------------


def allreduce_worker(args) -> int:
    """One rank: check the sum, time ops, then run exactly `ops` ops between two barriers."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    control = Path(args.control)
    numel = args.mib * MIB // 4
    x = torch.full((numel,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    expected = world * (world + 1) / 2
    correct = bool(torch.all(x == expected).item())
    for _ in range(5):  # warm-up, also sizes the run
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    per_op = torch.tensor([(time.perf_counter() - t0) / 10], device="cuda")
    dist.broadcast(per_op, 0)
    ops = max(10, int(args.seconds / per_op.item()))
    dist.barrier()
    if rank == 0:
        (control / "ready").write_text(str(ops))
        deadline = time.monotonic() + 120
        while not (control / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(ops):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    dist.barrier()
    torch.cuda.synchronize()
    size = numel * 4
    algbw = size * ops / elapsed
    result = {
        "rank": rank,
        "world": world,
        "correct_sum": correct,
        "bytes_per_op": size,
        "ops": ops,
        "seconds": elapsed,
        "algbw_gb_per_s": algbw / 1e9,
        "busbw_gb_per_s": algbw * 2 * (world - 1) / world / 1e9,
        # ring all-reduce: each rank sends (and receives) 2(N-1)/N of the buffer per op
        "expected_tx_bytes_per_rank": int(size * ops * 2 * (world - 1) / world),
    }
    (control / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


def run_telemetry_once() -> dict:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "glm5svc", "telemetry", "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    out: dict = {"rc": proc.returncode, "seconds": time.perf_counter() - started}
    try:
        out["snapshot"] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out["stdout"] = proc.stdout[-4000:]
    out["stderr"] = proc.stderr[-2000:]
    return out


def allreduce_phase(label: str, extra_env: dict, args, logs: Path | None) -> dict:
    import torch

    from glm5svc.telemetry import Sampler

    world = torch.cuda.device_count()
    if world < 2:
        return {"skipped": f"{world} GPU: an all-reduce needs two"}
    control = Path(tempfile.mkdtemp(prefix=f"allreduce-{label}-"))
    port = free_port()
    env = dict(os.environ, **SAFE_ENV, **extra_env)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,ENV,P2P,SHM",
    )
    log_path = (logs or control) / f"nccl-{label}.log"
    procs = []
    with open(log_path, "w") as log:
        for rank in range(world):
            cmd = [sys.executable, __file__, "allreduce-worker", "--control", str(control)]
            cmd += ["--mib", str(args.mib), "--seconds", str(args.allreduce_seconds)]
            procs.append(
                subprocess.Popen(
                    cmd, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=log, stderr=log
                )
            )
        sampler = Sampler(period_s=0.25, pcie_period_s=0.02).start()
        try:
            deadline = time.monotonic() + 180
            while not (control / "ready").exists():
                if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError(f"workers did not get ready; see {log_path}")
                time.sleep(0.01)
            nv_before = nvlink_totals()
            window = sampler.open_window(label)
            (control / "go").write_text("")
            time.sleep(min(2.0, args.allreduce_seconds / 3))
            telemetry = run_telemetry_once()
            rc = [p.wait(timeout=300) for p in procs]
            stats = sampler.close_window(window)
            nv_after = nvlink_totals()
        finally:
            sampler.stop()
            for p in procs:
                if p.poll() is None:
                    p.kill()
    ranks = [json.loads((control / f"rank{r}.json").read_text()) for r in range(world)]
    transport = [
        line.strip()
        for line in log_path.read_text(errors="replace").splitlines()
        if " via " in line or "NCCL version" in line
    ]
    return {
        "env": extra_env,
        "worker_rc": rc,
        "ranks": ranks,
        "window": stats.to_dict(),
        "nvlink_delta": nvlink_delta(nv_before, nv_after),
        "telemetry_once": telemetry,
        "nccl_transport_lines": transport[:40],
    }


# -- report --------------------------------------------------------------------------------


def report(result: dict) -> None:
    env = result["environment"]
    print(
        f"\n{env['date']}  {env.get('gpu_count')}x {(env.get('gpus') or ['?'])[0]}  "
        f"driver {env.get('driver')}  torch {env.get('torch')}  NCCL {env.get('nccl')}"
    )
    cost = result.get("sample_cost", {})
    for k, stat in cost.get("read_sample_first_k", {}).items():
        print(
            f"  whole sample, {k} GPU(s): median {stat['median_us']:.0f} us "
            f"({stat['median_us_per_gpu']:.0f} us/GPU), p99 {stat['p99_us']:.0f} us"
        )
    now = cost.get("sampler_sample_now_all_gpus")
    if now:
        print(f"  Sampler.sample_now (all GPUs, with energy): median {now['median_us']:.0f} us")
    for gpu, probe in result.get("nvlink_probe", {}).items():
        if isinstance(probe, dict):
            print(
                f"  GPU {gpu} NVLink: {probe.get('active_links')} active links, aggregate "
                f"{probe.get('aggregate')}, read {probe.get('aggregate_read_cost')}"
            )
    for label in ("allreduce_p2p", "allreduce_no_p2p"):
        phase = result.get(label)
        if not isinstance(phase, dict) or "ranks" not in phase:
            continue
        r0 = phase["ranks"][0]
        print(
            f"  {label}: {r0['ops']} ops x {r0['bytes_per_op'] / MIB:.0f} MiB in "
            f"{r0['seconds']:.1f} s, busbw {r0['busbw_gb_per_s']:.1f} GB/s, "
            f"sum correct {all(r['correct_sum'] for r in phase['ranks'])}"
        )
        for g in phase["window"]["gpus"]:
            nv = phase["nvlink_delta"].get(str(g["gpu"]), {})
            expected = phase["ranks"][g["gpu"]]["expected_tx_bytes_per_rank"]
            print(
                f"    GPU {g['gpu']}: PCIe TX {(g['pcie_tx_bytes'] or 0) / 2**30:.2f} GiB "
                f"RX {(g['pcie_rx_bytes'] or 0) / 2**30:.2f} GiB (gaps {g['pcie_gaps']}); "
                f"NVLink {nv}; expected TX {expected / 2**30:.2f} GiB"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    worker = sub.add_parser("allreduce-worker")
    worker.add_argument("--control", required=True)
    worker.add_argument("--mib", type=int, default=256)
    worker.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=Path("results/multi-gpu.json"))
    parser.add_argument("--logs", type=Path, help="folder for the NCCL logs")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--mib", type=int, default=256, help="all-reduce buffer per rank")
    parser.add_argument("--allreduce-seconds", type=float, default=8.0)
    parser.add_argument(
        "--short", action="store_true", help="5 reads per figure and no all-reduce (no torch)"
    )
    args = parser.parse_args(argv)
    if args.short:
        args.samples = 5
    if args.mode == "allreduce-worker":
        return allreduce_worker(args)

    result: dict = {"environment": environment()}
    write_json(args.out, result)
    phases = [
        ("sample_cost", lambda: sample_cost(args.samples)),
        ("nvlink_probe", lambda: nvlink_probe(args.samples)),
        ("telemetry_once_idle", run_telemetry_once),
    ]
    if not args.short:
        phases += [
            ("allreduce_p2p", lambda: allreduce_phase("p2p", {}, args, args.logs)),
            (
                "allreduce_no_p2p",
                lambda: allreduce_phase("no_p2p", {"NCCL_P2P_DISABLE": "1"}, args, args.logs),
            ),
        ]
    failed = run_phases(phases, result, args.out)
    try:
        report(result)
    except Exception:  # a missing figure must not hide the JSON
        traceback.print_exc()
    print(f"\nwrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
