"""Run the checks in order over the host's facts and gather their rows into a report.

A broken check is a row of its own (unknown, with the exception), never a traceback, and
never hides the other checks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from glm5svc.config import Config
from glm5svc.facts import HostFacts
from glm5svc.preflight.container import check_container_resources
from glm5svc.preflight.disk import check_disk
from glm5svc.preflight.gpu import (
    check_compute_capability,
    check_driver,
    check_gpu_count,
    check_gpu_processes,
    check_uvm_device,
    check_uvm_hmm,
)
from glm5svc.preflight.limits import check_rlimits
from glm5svc.preflight.model import check_model_directory
from glm5svc.preflight.rows import (
    FAIL,
    OK,
    UNIVERSAL,
    UNKNOWN,
    WARN,
    Check,
    CheckRow,
    PreflightContext,
)
from glm5svc.preflight.service import check_exposure, check_last_run, check_ports
from glm5svc.preflight.stack import check_cuda_toolkit, check_stack_and_patches
from glm5svc.preflight.topology import check_gpu_topology


@dataclass
class PreflightReport:
    rows: list[CheckRow] = field(default_factory=list)

    @property
    def has_failures(self) -> bool:
        return any(row.status == FAIL for row in self.rows)

    def to_dict(self) -> dict:
        return {"ok": not self.has_failures, "checks": [asdict(row) for row in self.rows]}

    def render(self) -> str:
        width = max((len(row.name) for row in self.rows), default=10)
        lines = []
        for row in self.rows:
            scope = "" if row.scope == UNIVERSAL else f" [{row.scope}]"
            marker = " [no GPU here]" if row.no_gpu and row.status == FAIL else ""
            lines.append(f"{row.status.upper():7} {row.name:<{width}}  {row.detail}{scope}{marker}")
            if row.fix and row.status != OK:
                lines.append(f"{'':7} {'':<{width}}  fix: {row.fix}")
        fails = [row for row in self.rows if row.status == FAIL]
        no_gpu = [row for row in fails if row.no_gpu]
        if no_gpu:
            lines.append(
                f"{len(no_gpu)} of the {len(fails)} fails ([no GPU here]: "
                f"{', '.join(row.name for row in no_gpu)}) are what a machine without an "
                "NVIDIA GPU and driver shows (a lab, CI); on the GPU host they must pass"
            )
        verdict = "FAILED" if self.has_failures else "passed"
        lines.append(f"preflight {verdict}: " + _counts(self.rows))
        return "\n".join(lines)


def _counts(rows: list[CheckRow]) -> str:
    order = (OK, WARN, FAIL, UNKNOWN)
    return ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in order)


def run_preflight(
    config: Config, facts: HostFacts | None = None, checks: list[Check] | None = None
) -> PreflightReport:
    """Every check's rows; `facts`: the host's facts if already read (serve reads them once
    for preflight and the plan), else read here."""
    context = PreflightContext(config, facts or HostFacts.read(config))
    report = PreflightReport()
    for check in checks or default_checks():
        try:
            report.rows += check(context)
        except Exception as exc:  # a broken check must not hide the others
            report.rows.append(CheckRow(check.__name__, UNKNOWN, f"check failed: {exc!r}"))
    return report


def default_checks() -> list[Check]:
    return [
        check_driver,
        check_gpu_count,
        check_compute_capability,
        check_gpu_topology,
        check_uvm_hmm,
        check_uvm_device,
        check_cuda_toolkit,
        check_model_directory,
        check_stack_and_patches,
        check_gpu_processes,
        check_last_run,
        check_rlimits,
        check_container_resources,
        check_disk,
        check_ports,
        check_exposure,
    ]
