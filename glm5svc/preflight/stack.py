"""Preflight rows for the serving stack: the CUDA toolkit of the stack profile, the sglang
installed for server.python against the profile's pin, and each sglang patch.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from glm5svc.errors import Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.model_info import ModelFacts
from glm5svc.patches import NSA_PATCH_ID
from glm5svc.patches.engine import PatchResult, Verdict
from glm5svc.preflight.rows import FAIL, OK, WARN, CheckRow, PreflightContext
from glm5svc.profiles import StackProfile, load_profile
from glm5svc.targets import get_target, planned_moe_backend

AUTOTUNE_PATCH_ID = "flashinfer-cutlass-autotune"

APPLY = "glm5svc patch apply"


def check_cuda_toolkit(ctx: PreflightContext) -> list[CheckRow]:
    """The CUDA toolkit of the stack profile (cu128: 12.8, cu130: 13.0) at CUDA_HOME."""
    profile = load_profile(ctx.config.server.profile)
    scope = f"profile {profile.name}"
    home = Path(ctx.config.server.cuda_home or profile.cuda_home)
    nvcc = home / "bin" / "nvcc"
    fix = (
        f"install cuda-toolkit-{profile.cuda_version.replace('.', '-')} (container role), "
        "or point server.cuda_home at it"
    )
    if not nvcc.exists():
        return [CheckRow("cuda toolkit", FAIL, f"{nvcc} not found", fix, scope)]
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [CheckRow("cuda toolkit", FAIL, f"{nvcc} does not run: {exc}", fix, scope)]
    match = re.search(r"release (\d+\.\d+)", out.stdout)
    release = match.group(1) if match else "unknown"
    if release != profile.cuda_version:
        detail = f"{nvcc} is CUDA {release}; profile {profile.name} needs {profile.cuda_version}"
        return [CheckRow("cuda toolkit", FAIL, detail, fix, scope)]
    return [CheckRow("cuda toolkit", OK, f"CUDA {release} at {home}", scope=scope)]


def check_stack_and_patches(ctx: PreflightContext) -> list[CheckRow]:
    """The service venv's sglang (server.python) and its patches, as the host facts read
    them."""
    config = ctx.config
    try:
        profile = load_profile(config.server.profile)
    except Glm5Error as exc:
        return [CheckRow("stack profile", FAIL, str(exc), "set server.profile to a known one")]
    return stack_rows(ctx.facts, profile, patch_needs(config, ctx.facts.model))


def patch_needs(config, model: ModelFacts) -> dict[str, tuple[bool, str]]:
    """{patch id: (does this plan need it, why)}: the autotune patch for the CUTLASS FP4 MoE
    runner, the NSA fix for a model with DSA attention (model.path's config.json)."""
    target = get_target(config.gpus.target)
    moe = planned_moe_backend(config.tuning, target) if model.moe else None
    uses_cutlass = moe == "flashinfer_cutlass"
    return {
        AUTOTUNE_PATCH_ID: (
            uses_cutlass,
            "the plan passes --moe-runner-backend flashinfer_cutlass"
            if uses_cutlass
            else f"the plan does not use the flashinfer_cutlass MoE runner "
            f"({model.architecture}, target {target.name})",
        ),
        NSA_PATCH_ID: (
            model.sparse_attention,
            f"{model.architecture} has DSA attention"
            if model.sparse_attention
            else f"{model.architecture} has no DSA attention",
        ),
    }


def stack_rows(
    facts: HostFacts,
    profile: StackProfile | None = None,
    needs: dict[str, tuple[bool, str]] | None = None,
) -> list[CheckRow]:
    """Rows: the installed sglang against the profile's pin, then one row per patch. `needs`
    (from patch_needs): a patch the plan does not need is reported, never a failure."""
    if facts.sglang is None:
        fix = "install the stack: pip install -r " + (
            str(profile.requirements_path) if profile else "<profile>.txt"
        )
        return [CheckRow("sglang", FAIL, facts.sglang_error, fix)]
    rows = [_version_row(facts.sglang.version, profile)]
    if facts.patches is None:
        fix = "reinstall the profile's pinned sglang, or fix glm5svc/data/patches"
        return rows + [CheckRow("patches", FAIL, facts.patches_error, fix)]
    for result in facts.patches.results:
        needed, why = (needs or {}).get(result.patch.id, (True, ""))
        rows.append(_patch_row(result) if needed else _unneeded_row(result, why))
    return rows


def _unneeded_row(result: PatchResult, why: str) -> CheckRow:
    state = result.verdict.value.replace("_", " ")
    return CheckRow(
        f"patch {result.patch.id}",
        OK,
        f"not needed here: {why} ({state}: {result.detail})",
        scope="only when the plan needs it",
    )


def _version_row(version: str, profile: StackProfile | None) -> CheckRow:
    if profile is None or version == profile.sglang_version:
        pinned = f" (profile {profile.name})" if profile else ""
        return CheckRow("sglang", OK, f"sglang {version}{pinned}")
    return CheckRow(
        "sglang",
        WARN,
        f"sglang {version} installed; profile {profile.name} pins {profile.sglang_version}",
        f"reinstall the pinned stack: pip install -r {profile.requirements_path}",
    )


def _patch_row(result: PatchResult) -> CheckRow:
    patch, verdict = result.patch, result.verdict
    name = f"patch {patch.id}"
    if verdict in (Verdict.APPLIED, Verdict.FIXED_UPSTREAM):
        return CheckRow(name, OK, f"{verdict.value.replace('_', ' ')}: {result.detail}")
    if verdict is Verdict.NOT_APPLIED:
        status = FAIL if patch.required else WARN
        effect = (
            f"not applied: {patch.title} is missing"
            if patch.required
            else "not applied: the launch plan keeps --disable-radix-cache (no prefix caching)"
        )
        return CheckRow(name, status, f"{effect} ({result.detail})", f"{APPLY} {patch.id}")
    if verdict is Verdict.NOT_APPLICABLE:
        return CheckRow(name, WARN, result.detail, "use the profile's pinned sglang")
    return CheckRow(
        name,
        FAIL if patch.required else WARN,
        f"unknown source: {result.detail}",
        "reinstall the profile's pinned sglang (pip install --force-reinstall --no-deps "
        "sglang==<pin>), or update glm5svc/data/patches for this version",
    )
