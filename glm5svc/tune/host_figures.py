"""The figures a tune's estimate needs, read from this host: the weights' size (the
safetensors index's total_size, else the shards' sizes), the disk's read speed (a short
read of a shard, its cached pages dropped first), the container's memory limit (cgroup
memory.max), and what a resumed run measured (its trials' starts and windows)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from glm5svc.config import Config
from glm5svc.facts import HostFacts
from glm5svc.patches import Verdict
from glm5svc.preflight.container import read_cgroup_limits
from glm5svc.serve.phases import StartBreakdown
from glm5svc.tune.estimate import GB, EstimateInputs, KnobCount, with_measurements
from glm5svc.tune.settings import SearchSettings
from glm5svc.tune.space import Space

INDEX_FILE = "model.safetensors.index.json"
DISK_READ_BYTES = 512 * 2**20  # at most this much ...
DISK_READ_SECONDS = 3.0  # ... or this long
DISK_READ_CHUNK = 8 * 2**20
MIN_DISK_SAMPLE = 32 * 2**20  # less read than this says nothing about the disk
START_FILE = "start.json"
STARTS_DIR = "starts"  # one folder per engine start; trials/NNN.json is one per trial
LEGACY_STARTS_DIR = "trials"  # runs written before the two were apart


def start_dirs(run_dir: Path) -> list[Path]:
    """Each engine start's folder (a run of an earlier version kept them under trials/)."""
    found = sorted((run_dir / STARTS_DIR).glob("[0-9][0-9][0-9]"))
    return found or sorted(p for p in (run_dir / LEGACY_STARTS_DIR).glob("[0-9][0-9][0-9]")
                           if p.is_dir())  # fmt: skip


def start_dir(run_dir: Path, start: int) -> Path:
    here = run_dir / STARTS_DIR / f"{start:03d}"
    legacy = run_dir / LEGACY_STARTS_DIR / f"{start:03d}"
    return legacy if not here.exists() and legacy.is_dir() else here


AUTOTUNE_CACHE_PATCH = "flashinfer-autotune-cache"


def weights_bytes(model_dir: Path) -> int | None:
    """The checkpoint's size: the index's metadata.total_size, else the shards' sizes."""
    try:
        index = json.loads((model_dir / INDEX_FILE).read_text(encoding="utf-8"))
        total = index.get("metadata", {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total
    except (OSError, ValueError, AttributeError):
        pass
    try:
        sizes = [p.stat().st_size for p in model_dir.glob("*.safetensors")]
    except OSError:
        return None
    return sum(sizes) or None


def measure_disk_read_bps(model_dir: Path) -> tuple[float | None, str]:
    """Bytes per second read from the largest shard, its cached pages dropped first so the
    disk, not the page cache, is measured; (None, why) when it cannot be measured."""
    try:
        shards = sorted(model_dir.glob("*.safetensors"), key=lambda p: p.stat().st_size)
    except OSError as exc:
        return None, f"cannot list {model_dir}: {exc}"
    if not shards:
        return None, f"no *.safetensors in {model_dir} to read"
    path = shards[-1]
    read = 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        started = time.monotonic()
        while read < DISK_READ_BYTES and time.monotonic() - started < DISK_READ_SECONDS:
            chunk = os.read(fd, DISK_READ_CHUNK)
            if not chunk:
                break
            read += len(chunk)
        elapsed = time.monotonic() - started
    except OSError as exc:
        return None, f"reading {path} failed: {exc.strerror}"
    finally:
        os.close(fd)
    if read < MIN_DISK_SAMPLE or elapsed <= 0:
        return None, f"{path} is too small ({read} bytes) to measure the disk"
    return read / elapsed, f"measured: {read / 2**20:,.0f} MiB of {path.name} in {elapsed:.2f} s"


def memory_limit_bytes() -> int | None:
    return read_cgroup_limits().memory_max


def measured_figures(run_dir: Path) -> dict[str, Any]:
    """A run's measured starts (to READY, one per engine start) and windows, from its
    trials' files (a start's live values are several trials of one start)."""
    ready_by_start: dict[int, float] = {}
    windows: list[float] = []
    settings = 0
    for path in sorted((run_dir / "trials").glob("[0-9][0-9][0-9].json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        outcome = record.get("outcome") or {}
        start = record.get("start")
        runs = [r.get("wall_s") for r in outcome.get("runs") or [] if isinstance(r, dict)]
        windows += [float(w) for w in runs if isinstance(w, int | float)]
        settings += 1 if runs else 0
        if not isinstance(start, int) or start in ready_by_start:
            continue
        breakdown = read_start(start_dir(run_dir, start))
        ready = (breakdown.ready_s if breakdown else None) or outcome.get("ready_after_s")
        if isinstance(ready, int | float):
            ready_by_start[start] = float(ready)
    starts = list(ready_by_start.values())
    return {"starts": starts, "windows": windows, "done_starts": len(starts),
            "done_settings": settings}  # fmt: skip


def read_start(trial_dir: Path) -> StartBreakdown | None:
    try:
        return StartBreakdown.from_dict(
            json.loads((trial_dir / START_FILE).read_text(encoding="utf-8"))
        )
    except (OSError, ValueError, TypeError):
        return None


def stand_in_engine(config: Config) -> str | None:
    """What the engine is when server.command is not sglang's launcher (a test engine, a
    wrapper): its start cannot be estimated from sglang's figures."""
    command = config.server.command
    if not command or any(
        part in ("sglang.launch_server", "sglang") or part.endswith("/sglang") for part in command
    ):
        return None
    name = next((Path(p).name for p in command if p.endswith(".py")), Path(command[0]).name)
    return f"a stand-in engine, server.command {name}"


def estimate_inputs(
    config: Config,
    facts: HostFacts,
    space: Space,
    settings: SearchSettings,
    disk_read_gbps: float | None,
    run_dir: Path | None,
    moe_backend: str | None,
) -> tuple[EstimateInputs, list[str]]:
    """The estimate's inputs for this configuration and host, and where each came from."""
    notes = []
    model_dir = Path(config.model.path)
    weights = None if config.model.load_format == "dummy" else weights_bytes(model_dir)
    weights_note = "their size is not known"
    if config.model.load_format == "dummy":
        weights_note = "none are read (model.load_format dummy)"
        notes.append("weights: none read (model.load_format dummy)")
    elif weights is None:
        weights_note = f"no safetensors index or shards in {model_dir}"
        notes.append(f"weights: {weights_note}")
    else:
        notes.append(f"weights: {weights / GB:,.1f} GB in {model_dir}")
    speed = disk_read_gbps * GB if disk_read_gbps else None
    if speed:
        notes.append(f"disk: {disk_read_gbps:g} GB/s (--disk-read-gbps)")
    elif weights:
        speed, how = measure_disk_read_bps(model_dir)
        notes.append(f"disk: {speed / GB:.2f} GB/s ({how})" if speed else f"disk: {how}")
    limit = memory_limit_bytes()
    notes.append(f"memory limit: {limit / 2**30:,.0f} GiB" if limit else "memory limit: none")
    autotune = facts.model.moe and (moe_backend or "").startswith("flashinfer")
    cached = False
    if facts.patches is not None:
        verdicts = {r.patch.id: r.verdict for r in facts.patches.results}
        cached = verdicts.get(AUTOTUNE_CACHE_PATCH) in (Verdict.APPLIED, Verdict.FIXED_UPSTREAM)
    inputs = EstimateInputs(
        knobs=tuple(KnobCount(k.name, len(k.values), k.restart) for k in space.knobs),  # fmt: skip
        budget_s=settings.budget_s,
        window_s=settings.window_s or config.benchmark.window_s,
        repeats=settings.min_repeats,
        weights_bytes=weights,
        weights_note=weights_note,
        disk_read_bps=speed,
        memory_limit_bytes=limit,
        moe_autotune=autotune,
        autotune_cached=cached,
        settle_s=settings.settle_s,
        max_repeats=settings.max_repeats,
        warmup_max_s=config.benchmark.warmup_max_s,
        stand_in=stand_in_engine(config),
        min_effect=settings.min_effect,
        confidence=settings.confidence,
        pair_spread=settings.pair_spread_prior,
        start_spread=settings.start_spread_prior,
    )
    if run_dir is not None:
        measured = measured_figures(run_dir)
        if measured["starts"]:
            notes.append(
                f"measured: {len(measured['starts'])} start(s), {len(measured['windows'])} "
                f"window(s) in {run_dir}"
            )
        inputs = with_measurements(inputs, **measured)
    return inputs, notes
