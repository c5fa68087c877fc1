#!/usr/bin/env python3
"""Benchmark of the GPU telemetry sampler on real GPUs (all visible GPUs at once).

Measures: the cost of one sample per GPU (median, p99) beside the naive PcieThroughput
call; the running sampler's CPU (its own threads' CPU time, per GPU) while the GPUs are
idle and while pinned host<->device copies keep PCIe busy; PCIe counting accuracy under
those copies (counted bytes / payload, and whether a counter wrap was lost); power rising
toward the limit under a bf16 matmul load, with the clock-event reasons seen. Prints
figures, writes JSON.

    PYTHONPATH=. python3 bench/telemetry.py --out results/telemetry-bench.json
    python -m testkit.with_fake_nvml 2 bench/telemetry.py --short    (CI: the fake NVML)

Needs torch with CUDA and nvidia-ml-py; not part of the unit tests.

Longer than 400 lines: a device run is one command; its cost, PCIe-accuracy and power
phases and the report read in the order they run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml  # noqa: E402

from bench.phases import run_phases  # noqa: E402
from glm5svc.nvml import (  # noqa: E402
    FI_PCIE_COUNT_RX_BYTES,
    FI_PCIE_COUNT_TX_BYTES,
    FI_PCIE_REPLAY_COUNTER,
    FI_POWER_INSTANT,
    FI_TOTAL_ENERGY_CONSUMPTION,
    text,
)
from glm5svc.telemetry import PynvmlSource, Sampler  # noqa: E402
from glm5svc.telemetry.decoding import (  # noqa: E402
    pcie_max_counter_rate,
    pcie_read_period_s,
    pcie_wrap_period_s,
)

GIB = 2**30
FI_ENERGY = 191  # NVML_FI_DEV_ENERGY, measured beside field 83


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise_us(samples_ns: list[int], cpu_ns: list[int] | None = None) -> dict:
    us = [s / 1000 for s in samples_ns]
    out = {"n": len(us), "median_us": percentile(us, 0.5), "p99_us": percentile(us, 0.99)}
    if cpu_ns:
        out["cpu_median_us"] = percentile([c / 1000 for c in cpu_ns], 0.5)
    return out


def time_call(call, n: int, gap_s: float = 0.0) -> dict:
    """Wall time per call, and this thread's CPU time (a blocking wait costs wall, not CPU).
    gap_s > 0: the calls that far apart, as the sampler makes them (not back to back)."""
    samples, cpu = [], []
    for _ in range(n):
        if gap_s:
            time.sleep(gap_s)
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        try:
            call()
        except pynvml.NVMLError as exc:
            return {"error": str(exc)}
        samples.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return summarise_us(samples, cpu)


def per_call_costs(handle, n: int) -> dict:
    n_ = pynvml
    calls = {
        "PowerUsage": (lambda: n_.nvmlDeviceGetPowerUsage(handle), n),
        "EnforcedPowerLimit": (lambda: n_.nvmlDeviceGetEnforcedPowerLimit(handle), n),
        "UtilizationRates": (lambda: n_.nvmlDeviceGetUtilizationRates(handle), n),
        "MemoryInfo": (lambda: n_.nvmlDeviceGetMemoryInfo(handle), n),
        "Temperature": (lambda: n_.nvmlDeviceGetTemperature(handle, n_.NVML_TEMPERATURE_GPU), n),
        "ClockInfo(SM)": (lambda: n_.nvmlDeviceGetClockInfo(handle, n_.NVML_CLOCK_SM), n),
        "ClockInfo(MEM)": (lambda: n_.nvmlDeviceGetClockInfo(handle, n_.NVML_CLOCK_MEM), n),
        "CurrentClocksEventReasons": (
            lambda: n_.nvmlDeviceGetCurrentClocksEventReasons(handle),
            n,
        ),
        "PerformanceState": (lambda: n_.nvmlDeviceGetPerformanceState(handle), n),
        "CurrPcieLinkGeneration": (lambda: n_.nvmlDeviceGetCurrPcieLinkGeneration(handle), n),
        "CurrPcieLinkWidth": (lambda: n_.nvmlDeviceGetCurrPcieLinkWidth(handle), n),
        "PcieReplayCounter": (lambda: n_.nvmlDeviceGetPcieReplayCounter(handle), n),
        "ComputeRunningProcesses": (lambda: n_.nvmlDeviceGetComputeRunningProcesses(handle), n),
        "TotalEnergyConsumption": (lambda: n_.nvmlDeviceGetTotalEnergyConsumption(handle), 30),
        "FieldValues[energy 83]": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_TOTAL_ENERGY_CONSUMPTION]),
            30,
        ),
        "FieldValues[power_instant 186]": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_POWER_INSTANT]),
            n,
        ),
        "FieldValues[replay 94]": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_PCIE_REPLAY_COUNTER]),
            n,
        ),
        "FieldValues[186,94]": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_POWER_INSTANT, FI_PCIE_REPLAY_COUNTER]),
            n,
        ),
        "FieldValues[186,94,197,198] (sample batch)": (
            lambda: n_.nvmlDeviceGetFieldValues(
                handle,
                [
                    FI_POWER_INSTANT,
                    FI_PCIE_REPLAY_COUNTER,
                    FI_PCIE_COUNT_TX_BYTES,
                    FI_PCIE_COUNT_RX_BYTES,
                ],
            ),
            n,
        ),
        "FieldValues[197,198] (PCIe counters)": (
            lambda: n_.nvmlDeviceGetFieldValues(
                handle, [FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]
            ),
            n,
        ),
        "FieldValues[197] (TX alone)": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_PCIE_COUNT_TX_BYTES]),
            n,
        ),
        "FieldValues[198] (RX alone)": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_PCIE_COUNT_RX_BYTES]),
            n,
        ),
        "FieldValues[energy 191]": (
            lambda: n_.nvmlDeviceGetFieldValues(handle, [FI_ENERGY]),
            30,
        ),
        "PcieThroughput(TX) naive": (
            lambda: n_.nvmlDeviceGetPcieThroughput(handle, n_.NVML_PCIE_UTIL_TX_BYTES),
            5,
        ),
        "PcieThroughput(RX) naive": (
            lambda: n_.nvmlDeviceGetPcieThroughput(handle, n_.NVML_PCIE_UTIL_RX_BYTES),
            5,
        ),
    }
    costs = {name: time_call(call, count) for name, (call, count) in calls.items()}
    pcie = calls["FieldValues[197,198] (PCIe counters)"][0]
    costs["FieldValues[197,198] 50 ms apart"] = time_call(pcie, max(5, n // 8), 0.05)
    costs.update(gpm_costs(handle, n))
    return costs


def gpm_costs(handle, n: int) -> dict:
    """GPM sample and metric query, where the GPU has GPM (Hopper and newer)."""
    try:
        if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return {"GpmSampleGet": {"error": "GPM not supported on this GPU"}}
        sample = pynvml.nvmlGpmSampleAlloc()
    except pynvml.NVMLError as exc:
        return {"GpmSampleGet": {"error": str(exc)}}
    try:
        get = lambda: pynvml.nvmlGpmSampleGet(handle, sample)  # noqa: E731
        return {
            "GpmSampleGet": time_call(get, n),
            "GpmSampleGet 1 s apart": time_call(get, max(3, n // 60), 1.0),
        }
    finally:
        pynvml.nvmlGpmSampleFree(sample)


def per_call_costs_gpu0(n: int) -> dict:
    pynvml.nvmlInit()
    try:
        return per_call_costs(pynvml.nvmlDeviceGetHandleByIndex(0), n)
    finally:
        pynvml.nvmlShutdown()


def naive_cost(result: dict) -> float | None:
    calls = result.get("per_call_cost_gpu0", {})
    try:
        return (
            result["sampler_cost"]["0"]["whole_sample"]["median_us"]
            + calls["PcieThroughput(TX) naive"]["median_us"]
            + calls["PcieThroughput(RX) naive"]["median_us"]
        )
    except KeyError:
        return None


def sampler_costs(n: int) -> dict:
    """The sampler's reads, per GPU: the sample, the PCIe counters, both together (the
    per-sample cost), and the energy counter, which is read once per period on its own."""
    source = PynvmlSource()
    gpus = source.open()
    result = {}
    try:
        for gpu in gpus:
            i = gpu.index
            sample = time_call(lambda i=i: source.read_sample(i), n)
            pcie = time_call(lambda i=i: source.read_pcie_bytes(i), n)
            energy = time_call(lambda i=i: source.read_energy_mj(i), min(n, 50))
            figures = {
                # read_sample includes the PCIe counters (one batched field read) where the
                # GPU has no GPM: it is the whole per-sample cost; read_pcie is the fast
                # loop's read, read_gpm the GPM reading that replaces it.
                "whole_sample": sample,
                "read_pcie": pcie,
                "read_energy": energy,
            }
            if source.has_gpm_pcie(i):
                figures["read_gpm"] = time_call(lambda i=i: source.read_gpm_pcie(i), n)
            result[str(i)] = figures
    finally:
        source.close()
    return result


def threads_cpu_s(threads) -> float:
    """CPU seconds the given (running) threads have used, NVML's busy waits included."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in threads)


class CpuMeter:
    """The sampler's own CPU share over a stretch (its threads alone: a load generator in
    the same process does not count), and the counter reads made in it."""

    def __init__(self, sampler: Sampler):
        self.sampler = sampler
        self.cpu0 = threads_cpu_s(sampler.threads)
        self.process0 = time.process_time()
        self.t0 = time.monotonic()
        self.reads0 = [r["reads"] for r in sampler.pcie_counter_stats()]

    def result(self) -> dict:
        wall = time.monotonic() - self.t0
        cpu = threads_cpu_s(self.sampler.threads) - self.cpu0
        stats = self.sampler.pcie_counter_stats()
        gpus = max(1, len(stats))
        return {
            "seconds": wall,
            "sampler_cpu_share_of_one_core": cpu / wall,
            "sampler_cpu_share_per_gpu": cpu / wall / gpus,
            "process_cpu_share_of_one_core": (time.process_time() - self.process0) / wall,
            "pcie_reads_per_s": [
                (r["reads"] - before) / wall for r, before in zip(stats, self.reads0, strict=False)
            ],
            "counter_reads": stats,
        }


def sampler_cpu(seconds: float, period: float, pcie_period: float, use_gpm: bool) -> dict:
    """CPU the running sampler (both loops) takes on idle GPUs, as a share of one core."""
    source = PynvmlSource(use_gpm=use_gpm)
    sampler = Sampler(source, period_s=period, pcie_period_s=pcie_period).start()
    try:
        sampler.wait_for_sample(5)
        meter = CpuMeter(sampler)
        time.sleep(seconds)
        result = meter.result()
    finally:
        sampler.stop()
    return {"period_s": period, "pcie_period_s": pcie_period, "use_gpm": use_gpm, **result}


def pcie_read_schedule_gpu0(pcie_period: float) -> dict:
    """The PCIe read periods GPU 0's link gets: quiet, and at its top rate."""
    source = PynvmlSource()
    gpu = source.open()[0]
    source.close()
    max_rate = pcie_max_counter_rate(gpu.max_pcie_generation, gpu.max_pcie_width)
    return {
        "max_pcie_generation": gpu.max_pcie_generation,
        "max_pcie_width": gpu.max_pcie_width,
        "top_counter_rate_bytes_per_s": max_rate,
        "wrap_period_at_top_rate_s": pcie_wrap_period_s(max_rate),
        "quiet_period_s": pcie_read_period_s(max_rate, 0.0, pcie_period),
        "period_at_top_rate_s": pcie_read_period_s(max_rate, max_rate, pcie_period),
    }


def pcie_load(
    torch,
    devices: list[int],
    copy_gib: int,
    chunk_gib: int,
    period: float,
    idle_s: float,
    use_gpm: bool,
):
    """The sampler's CPU and counting under full PCIe load: pinned copies one way at a
    time (counted/payload per direction), then both ways at once (CPU only: read requests
    for the host-to-device copies cross in the other direction). The sampler starts on
    idle GPUs, so the first copy is a jump from quiet to the link's top rate."""
    chunk = chunk_gib * GIB
    repeats = max(1, copy_gib // chunk_gib)
    hosts = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in devices]
    devs = [torch.empty(chunk, dtype=torch.uint8, device=f"cuda:{d}") for d in devices]
    back = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in devices]
    for host in hosts:
        host.fill_(1)
    for host, dev in zip(hosts, devs, strict=True):  # warm-up, outside the windows
        dev[: 64 * 2**20].copy_(host[: 64 * 2**20])
        host[: 64 * 2**20].copy_(dev[: 64 * 2**20])
    sync_all(torch, devices)
    streams = [torch.cuda.Stream(device=d) for d in devices]
    result = {"chunk_bytes": chunk, "repeats": repeats, "pcie_period_s": period, "use_gpm": use_gpm}

    def both_ways(h, d, b, stream):
        d.copy_(h, non_blocking=True)
        with torch.cuda.stream(stream):
            b.copy_(d, non_blocking=True)

    sampler = Sampler(PynvmlSource(use_gpm=use_gpm), period_s=1.0, pcie_period_s=period)
    sampler.start()
    try:
        sampler.wait_for_sample(5)
        time.sleep(idle_s)  # quiet first: the copies below start from the quiet period
        for direction, copy in (
            ("host_to_device", lambda h, d, b, s: d.copy_(h, non_blocking=True)),
            ("device_to_host", lambda h, d, b, s: h.copy_(d, non_blocking=True)),
            ("both_ways", both_ways),
        ):
            meter = CpuMeter(sampler)
            window = sampler.open_window(direction)
            t0 = time.perf_counter()
            for _ in range(repeats):
                for host, dev, out, stream in zip(hosts, devs, back, streams, strict=True):
                    copy(host, dev, out, stream)
                sync_all(torch, devices)
            elapsed = time.perf_counter() - t0
            stats = sampler.close_window(window)
            cpu = meter.result()
            payload = chunk * repeats
            per_gpu = []
            for g in stats.gpus:
                # NVML's TX/RX are from the GPU's side: host->device arrives as RX.
                counted = g.pcie_rx_bytes if direction == "host_to_device" else g.pcie_tx_bytes
                other = g.pcie_tx_bytes if direction == "host_to_device" else g.pcie_rx_bytes
                per_gpu.append(
                    {
                        "gpu": g.gpu,
                        "payload_bytes": payload,
                        "counted_bytes": counted,
                        "counted_over_payload": counted / payload if counted is not None else None,
                        "other_direction_bytes": other,
                        "gaps_possible_lost_wrap": g.pcie_gaps,
                        "payload_gb_per_s": payload / elapsed / 1e9,
                    }
                )
            result[direction] = {"seconds": elapsed, "gpus": per_gpu, "cpu": cpu}
        result["counter_reads"] = sampler.pcie_counter_stats()
    finally:
        sampler.stop()
        del hosts, devs, back
        torch.cuda.empty_cache()
    return result


def sync_all(torch, devices):
    for d in devices:
        torch.cuda.synchronize(d)


def matmul_power(torch, devices: list[int], seconds: float, size: int) -> dict:
    sampler = Sampler(period_s=0.25, pcie_period_s=0.02).start()
    timeline = []
    stop = threading.Event()

    def record():
        t0 = time.monotonic()
        while not stop.wait(0.5):
            snap = sampler.snapshot()
            for g in snap.gpus:
                timeline.append(
                    {
                        "t_s": round(time.monotonic() - t0, 2),
                        "gpu": g.index,
                        "power_w": g.power_w,
                        "power_instant_w": g.power_instant_w,
                        "power_limit_w": g.power_limit_w,
                        "sm_clock_mhz": g.sm_clock_mhz,
                        "temperature_c": g.temperature_c,
                        "reasons": list(g.clock_event_reasons),
                    }
                )

    try:
        sampler.wait_for_sample(5)
        idle = {g.index: g.to_dict() for g in sampler.snapshot().gpus}
        mats = [torch.randn(size, size, dtype=torch.bfloat16, device=f"cuda:{d}") for d in devices]
        outs = [torch.empty_like(m) for m in mats]
        recorder = threading.Thread(target=record, daemon=True)
        recorder.start()
        window = sampler.open_window("matmul")
        t0 = time.perf_counter()
        count = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                for m, o in zip(mats, outs, strict=True):
                    torch.matmul(m, m, out=o)
            count += 10
            sync_all(torch, devices)
        elapsed = time.perf_counter() - t0
        stats = sampler.close_window(window)
        stop.set()
        recorder.join()
    finally:
        stop.set()
        sampler.stop()
    tflops = 2 * size**3 * count / elapsed / 1e12
    reach = {}
    for g in stats.gpus:
        limit = g.power_limit_w or 0
        first = next(
            (
                p["t_s"]
                for p in timeline
                if p["gpu"] == g.gpu and p["power_w"] and limit and p["power_w"] >= 0.9 * limit
            ),
            None,
        )
        reach[str(g.gpu)] = first
    return {
        "seconds": elapsed,
        "matrix_size": size,
        "tflops_per_gpu": tflops,
        "idle": idle,
        "window": stats.to_dict(),
        "seconds_to_90pct_of_limit": reach,
        "timeline": timeline,
    }


def environment(devices) -> dict:
    pynvml.nvmlInit()
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(text(pynvml.nvmlDeviceGetName(h)))
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpus": gpus,
        "gpu_name": gpus[0] if gpus else None,
        "gpu_count": len(gpus),
        "driver": text(driver),
        "nvidia_ml_py": importlib.metadata.version("nvidia-ml-py"),
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def fmt_us(stat: dict) -> str:
    if "error" in stat:
        return f"error: {stat['error']}"
    return (
        f"median {stat['median_us']:9.1f} us   p99 {stat['p99_us']:9.1f} us   "
        f"cpu {stat.get('cpu_median_us', float('nan')):8.1f} us"
    )


def report_load(name: str, acc: dict | None) -> None:
    if not acc or "error" in acc:
        return
    source = "GPM where the GPU has it" if acc["use_gpm"] else "32-bit counters"
    print(f"\nPCIe under load, {source} ({name}):")
    for direction in ("host_to_device", "device_to_host", "both_ways"):
        print(f"  {direction}: {fmt_cpu(acc[direction]['cpu'])}")
        for g in acc[direction]["gpus"]:
            ratio = g["counted_over_payload"]
            print(
                f"  GPU {g['gpu']} {direction:15s} payload {g['payload_bytes'] / GIB:6.1f} GiB"
                f"  counted {(g['counted_bytes'] or 0) / GIB:6.1f} GiB  ratio "
                f"{ratio if ratio is None else round(ratio, 4)}  "
                f"{g['payload_gb_per_s']:.1f} GB/s  possible lost wraps "
                f"{g['gaps_possible_lost_wrap']}"
            )
    for r in acc["counter_reads"]:
        print(
            f"  GPU {r['gpu']} ({r['source']}): {r['reads']} reads, longest interval "
            f"{r['max_read_interval_s'] * 1000:.1f} ms, wrap period at link max "
            f"{r['wrap_period_s'] * 1000:.1f} ms, periods chosen "
            f"{(r['shortest_period_s'] or 0) * 1000:.1f}-"
            f"{(r['longest_period_s'] or 0) * 1000:.1f} ms"
        )


def fmt_cpu(cpu: dict) -> str:
    reads = ", ".join(f"{r:.1f}" for r in cpu["pcie_reads_per_s"])
    return (
        f"{cpu['sampler_cpu_share_per_gpu'] * 100:.2f}% of one core per GPU "
        f"({cpu['sampler_cpu_share_of_one_core'] * 100:.2f}% in all, over "
        f"{cpu['seconds']:.1f} s; PCIe reads/s per GPU: {reads})"
    )


def report(result: dict) -> None:
    try:
        _report(result)
    except Exception:  # a missing phase must not hide the JSON
        traceback.print_exc()


def _report(result: dict) -> None:
    env = result["environment"]
    print(
        f"{env['date']}  {env['gpu_count']}x {env['gpu_name']}  driver {env['driver']}  "
        f"nvidia-ml-py {env['nvidia_ml_py']}  torch {env.get('torch')}"
    )
    print("\nPer-call cost (GPU 0):")
    for name, stat in result["per_call_cost_gpu0"].items():
        print(f"  {name:40s} {fmt_us(stat)}")
    print("\nSampler cost per GPU per sample:")
    for gpu, costs in result["sampler_cost"].items():
        for name, stat in costs.items():
            print(f"  GPU {gpu} {name:14s} {fmt_us(stat)}")
    naive = result.get("naive_sample_cost_us")
    print(f"  naive sample (whole sample + PcieThroughput TX + RX), GPU 0: ~{naive} us")
    schedule = result.get("pcie_read_schedule")
    if schedule and "error" not in schedule:
        print(
            f"  PCIe reads (GPU 0's link): every {schedule['quiet_period_s'] * 1000:.1f} ms "
            f"quiet, {schedule['period_at_top_rate_s'] * 1000:.1f} ms at the top rate; wrap "
            f"at the top rate {schedule['wrap_period_at_top_rate_s'] * 1000:.1f} ms"
        )
    for name, what in (
        ("sampler_cpu", "running sampler, idle GPUs, GPM where the GPU has it"),
        ("sampler_cpu_counters", "running sampler, idle GPUs, 32-bit counters"),
        ("sampler_cpu_slow_loop_only", "slow loop alone (counter reads every 30 s)"),
    ):
        cpu = result.get(name)
        if cpu and "error" not in cpu:
            print(f"  {what} (period {cpu['period_s']} s): {fmt_cpu(cpu)}")
    for name in ("pcie_load", "pcie_load_counters"):
        report_load(name, result.get(name))
    power = result.get("matmul_power")
    if power:
        print(
            f"\nPower under bf16 matmul {power['matrix_size']}^3 for {power['seconds']:.0f} s "
            f"({power['tflops_per_gpu']:.0f} TFLOP/s per GPU):"
        )
        for gpu, idle in power["idle"].items():
            print(
                f"  GPU {gpu} idle: {idle['power_w']} W avg, {idle['power_instant_w']} W instant,"
                f" reasons {idle['clock_event_reasons']}"
            )
        for g in power["window"]["gpus"]:
            print(
                f"  GPU {g['gpu']} load: average {g['average_power_w']:.0f} W, peak "
                f"{g['peak_power_w']:.0f} W of {g['power_limit_w']:.0f} W limit "
                f"(share {g['power_share_of_limit']:.2f}, "
                f"peak {g['peak_power_share_of_limit']:.2f})"
                f", SM clock {g['min_sm_clock_mhz']}-{g['max_sm_clock_mhz']} MHz, "
                f"power-limited {g['power_limited_s']:.1f} s, "
                f"thermal {g['thermal_limited_s']:.1f} s,"
                f" reasons seen {g['clock_event_reasons_seen']}, "
                f"90% of limit after {power['seconds_to_90pct_of_limit'][str(g['gpu'])]} s"
            )
        for p in power["timeline"][:: max(1, len(power["timeline"]) // 12)]:
            print(
                f"    t={p['t_s']:5.1f}s gpu{p['gpu']} {p['power_w']} W "
                f"(instant {p['power_instant_w']}) SM {p['sm_clock_mhz']} MHz {p['reasons']}"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/telemetry-bench.json"))
    parser.add_argument("--samples", type=int, default=300, help="reads per cost figure")
    parser.add_argument(
        "--copy-gib", type=int, default=256, help="payload per direction per GPU (~5 s at Gen5)"
    )
    parser.add_argument("--chunk-gib", type=int, default=4)
    parser.add_argument(
        "--pcie-period", type=float, default=0.02, help="shortest PCIe read period (s)"
    )
    parser.add_argument("--sampler-seconds", type=float, default=10.0, help="idle CPU figures")
    parser.add_argument("--matmul-seconds", type=float, default=25.0, help="0: no power phase")
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--skip-torch", action="store_true", help="cost figures only")
    parser.add_argument(
        "--short", action="store_true", help="cost figures only, 5 reads each, 1 s of sampler"
    )
    args = parser.parse_args(argv)
    sampler_seconds = args.sampler_seconds
    if args.short:
        args.skip_torch, args.samples, sampler_seconds = True, 5, 1.0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"bench/telemetry.py needs an NVIDIA GPU and driver: {exc}", file=sys.stderr)
        return 69
    pynvml.nvmlShutdown()

    torch = None
    if not args.skip_torch:
        import torch  # noqa: PLC0415 - optional: only the copy and load phases need it
    devices = list(range(torch.cuda.device_count())) if torch else []
    result: dict = {"environment": environment(devices)}
    if torch:
        result["environment"]["torch"] = torch.__version__
    phases = [("per_call_cost_gpu0", lambda: per_call_costs_gpu0(args.samples))]
    phases.append(("sampler_cost", lambda: sampler_costs(args.samples)))
    phases.append(("pcie_read_schedule", lambda: pcie_read_schedule_gpu0(args.pcie_period)))
    for name, floor, use_gpm in (
        ("sampler_cpu", args.pcie_period, True),
        ("sampler_cpu_counters", args.pcie_period, False),
        ("sampler_cpu_slow_loop_only", 30.0, False),
    ):
        phases.append((name, lambda f=floor, g=use_gpm: sampler_cpu(sampler_seconds, 1.0, f, g)))
    for name, use_gpm in (("pcie_load", True), ("pcie_load_counters", False)):
        if torch:
            phases.append(
                (
                    name,
                    lambda g=use_gpm: pcie_load(
                        torch, devices, args.copy_gib, args.chunk_gib, args.pcie_period, 2.0, g
                    ),
                )
            )
    if torch and args.matmul_seconds > 0:
        phases.append(
            (
                "matmul_power",
                lambda: matmul_power(torch, devices, args.matmul_seconds, args.matmul_size),
            )
        )

    def add_naive_cost(name: str, figures: dict) -> None:
        if name == "sampler_cost" and "error" not in figures[name]:
            figures["naive_sample_cost_us"] = naive_cost(figures)

    failed = run_phases(phases, result, args.out, after=add_naive_cost)
    report(result)
    print(f"\nwrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
