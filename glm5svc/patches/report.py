"""What the launch plan and preflight ask: is the NSA fix in place, and the whole report."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.patches.engine import PatchResult, Verdict, evaluate_all
from glm5svc.patches.install import SglangInstall, SglangNotFound, locate_sglang
from glm5svc.patches.spec import select_patches

NSA_PATCH_ID = "nsa-fp8-mha-prefix"


@dataclass
class PatchReport:
    install: SglangInstall
    results: list[PatchResult] = field(default_factory=list)

    def result(self, patch_id: str) -> PatchResult:
        return next(r for r in self.results if r.patch.id == patch_id)

    @property
    def changed(self) -> bool:
        return any(r.action != "none" for r in self.results)

    @property
    def unknown(self) -> list[PatchResult]:
        return [r for r in self.results if r.verdict is Verdict.UNKNOWN_SOURCE]

    @property
    def missing_required(self) -> list[PatchResult]:
        return [r for r in self.results if r.patch.required and r.verdict is Verdict.NOT_APPLIED]

    @property
    def radix_cache_safe(self) -> bool | None:
        """True: the NSA fix is in place; False: it is not; None: cannot tell."""
        return _nsa_verdict_to_answer(self.result(NSA_PATCH_ID).verdict)

    def to_dict(self) -> dict:
        return {
            "ok": not self.unknown,
            "changed": self.changed,
            "sglang": self.install.to_dict(),
            "radix_cache_safe": self.radix_cache_safe,
            "patches": [r.to_dict() for r in self.results],
        }


def resolve_target(target) -> SglangInstall:
    """SglangInstall for a Config, an interpreter path or a site-packages directory."""
    if isinstance(target, SglangInstall):
        return target
    server = getattr(target, "server", None)
    if server is not None:
        return locate_sglang(python=server.python, pythonpath=server.env.get("PYTHONPATH"))
    path = Path(os.fspath(target))
    if path.is_dir():
        return locate_sglang(site_packages=path)
    return locate_sglang(python=path)


def patch_report(target, patch_ids: list[str] | None = None) -> PatchReport:
    """Every patch's verdict for the sglang of `target` (a Config, python, or site-packages).
    Raises SglangNotFound when there is no sglang there."""
    install = resolve_target(target)
    return PatchReport(install, evaluate_all(select_patches(patch_ids), install))


def nsa_fix_in_place(target) -> bool | None:
    """Is the NSA FP8 prefill fix in the sglang of `target` (patched, or fixed upstream)?
    True/False; None when it cannot be told (no sglang, unknown source). Never raises for
    a missing or odd install: the launch plan then keeps --disable-radix-cache."""
    try:
        report = patch_report(target, [NSA_PATCH_ID])
    except (SglangNotFound, OSError, ValueError):
        return None
    return report.radix_cache_safe


def _nsa_verdict_to_answer(verdict: Verdict) -> bool | None:
    if verdict in (Verdict.APPLIED, Verdict.FIXED_UPSTREAM):
        return True
    if verdict in (Verdict.NOT_APPLIED, Verdict.NOT_APPLICABLE):
        return False
    return None
