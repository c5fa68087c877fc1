"""Where a run's numbers came from: versions, GPUs, driver, power limits, launch plan, date."""

from __future__ import annotations

import platform
import socket
import subprocess
from datetime import UTC, datetime
from typing import Any

from glm5svc import __version__
from glm5svc.fleet import fetch_answer
from glm5svc.launch_plan import plan_for_service
from glm5svc.records import PlanSummary, to_dict

_SGLANG_VERSION = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('sglang'))\nexcept m.PackageNotFoundError:\n"
    "    import sglang.version as v; print(v.__version__)\n"
)


def sglang_version(python: str) -> str | None:
    """The version of the sglang that `python` would run (metadata only: no torch import)."""
    try:
        done = subprocess.run(
            [python, "-c", _SGLANG_VERSION], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else None


def gpu_facts(sampler: Any) -> dict[str, Any]:
    """GPUs, driver and power limits from the sampler's last snapshot; never calls NVML."""
    if sampler is None or not hasattr(sampler, "snapshot"):
        return {"available": False, "reason": "no telemetry sampler"}
    snap = sampler.snapshot()
    if not getattr(snap, "available", False):
        return {"available": False, "reason": getattr(snap, "reason", None)}
    return {
        "available": True,
        "driver_version": snap.driver_version,
        "count": len(snap.gpus),
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "pci_bus_id": g.pci_bus_id,
                "power_limit_w": g.power_limit_w,
                "pcie": f"gen{g.pcie_generation} x{g.pcie_width}" if g.pcie_generation else None,
            }
            for g in snap.gpus
        ],
    }


LAUNCHED = "launched: the plan glm5svc serve started"
PLANNED_HERE = (
    "planned here: the plan glm5svc serve would start from this configuration on this host"
)


def launch_plan_summary(config: Any) -> Any:
    """The plan serve would build here (the same host facts: installed sglang, its patches,
    GPUs, config.json); the reason if it cannot be built."""
    if config is None:
        return None
    try:
        return to_dict(plan_for_service(config).summary())
    except Exception as exc:  # guarded on purpose: provenance must never fail a run
        return {"unavailable": f"{type(exc).__name__}: {exc}"}


def _installed_version(launch_plan: PlanSummary | None, python: str, config: Any) -> str | None:
    """The launched plan's sglang when bench_serving runs in the server's own interpreter:
    read once by serve, not again here."""
    same_python = config is not None and str(python) == str(config.server.python)
    sglang = launch_plan.sglang if launch_plan is not None else None
    if same_python and sglang is not None and sglang.installed:
        return sglang.version
    return None


def target_facts(base_url: str | None, api_key: str | None = None) -> dict[str, Any]:
    """What the benchmark talked to: the SGLang gateway (smg answers GET /readiness with
    healthy_workers/total_workers, and GET /workers with its worker list) or one server."""
    if not base_url:
        return {"kind": "unknown"}
    readiness = fetch_answer(base_url.rstrip("/") + "/readiness", timeout=5)
    doc = readiness.document
    if not (isinstance(doc, dict) and "healthy_workers" in doc):
        return {"kind": "server", "base_url": base_url}
    facts: dict[str, Any] = {
        "kind": "gateway",
        "base_url": base_url,
        "healthy_workers": doc.get("healthy_workers"),
        "total_workers": doc.get("total_workers"),
    }
    workers = fetch_answer(base_url.rstrip("/") + "/workers", timeout=5, api_key=api_key).document
    if isinstance(workers, dict) and isinstance(workers.get("workers"), list):
        facts["workers"] = [
            {"url": w.get("url"), "is_healthy": w.get("is_healthy")} for w in workers["workers"]
        ]
    return facts


def collect(
    python: str,
    sampler: Any = None,
    config: Any = None,
    plan: Any = None,
    launch_plan: PlanSummary | None = None,
) -> dict[str, Any]:
    """`launch_plan`: the summary of the plan the service launched (the post-start
    benchmark); without it (`glm5svc bench` by hand) the plan is built here and says so."""
    launched = launch_plan is not None
    recorded = to_dict(launch_plan) if launched else launch_plan_summary(config)
    return {
        "target": target_facts(getattr(plan, "base_url", None), getattr(plan, "api_key", None)),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "glm5svc_version": __version__,
        "sglang_version": _installed_version(launch_plan, python, config) or sglang_version(python),
        "bench_serving": f"{python} -m sglang.bench_serving",
        "python": platform.python_version(),
        "gpus": gpu_facts(sampler),
        "launch_plan": recorded,
        "launch_plan_source": LAUNCHED if launched else PLANNED_HERE,
    }
