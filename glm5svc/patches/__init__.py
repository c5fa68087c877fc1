"""SGLang source patches for SM120, kept as data and applied by content.

Public API (for the host's facts, glm5svc.facts, and the `glm5svc patch` command):

- nsa_fix_in_place(target) -> bool | None
- patch_report(target, patch_ids=None) -> PatchReport
- locate_sglang(python=..., site_packages=...) -> SglangInstall

`target` is the service Config (its server.python), a venv interpreter path, a
site-packages directory, or an SglangInstall. See docs/patches.md.
"""

from glm5svc.patches.engine import PatchResult, UnknownSourceError, Verdict
from glm5svc.patches.install import SglangInstall, SglangNotFound, locate_sglang
from glm5svc.patches.report import NSA_PATCH_ID, PatchReport, nsa_fix_in_place, patch_report
from glm5svc.patches.spec import Patch, load_patches

__all__ = [
    "NSA_PATCH_ID",
    "Patch",
    "PatchReport",
    "PatchResult",
    "SglangInstall",
    "SglangNotFound",
    "UnknownSourceError",
    "Verdict",
    "load_patches",
    "locate_sglang",
    "nsa_fix_in_place",
    "patch_report",
]
