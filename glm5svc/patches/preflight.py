"""Preflight rows for the sglang stack and its patches (glm5svc preflight)."""

from __future__ import annotations

from glm5svc.checks import FAIL, OK, WARN, CheckRow, PreflightContext
from glm5svc.errors import Glm5Error
from glm5svc.model_info import read_model_facts
from glm5svc.patches.engine import PatchResult, Verdict
from glm5svc.patches.report import NSA_PATCH_ID, patch_report
from glm5svc.profiles import StackProfile, load_profile
from glm5svc.targets import get_target, planned_moe_backend

AUTOTUNE_PATCH_ID = "flashinfer-cutlass-autotune"

APPLY = "glm5svc patch apply"


def check_stack_and_patches(ctx: PreflightContext) -> list[CheckRow]:
    """The preflight check: rows for the service venv's sglang (ctx.config.server.python)."""
    config = ctx.config
    try:
        profile = load_profile(config.server.profile)
    except Glm5Error as exc:
        return [CheckRow("stack profile", FAIL, str(exc), "set server.profile to a known one")]
    return preflight_rows(config, profile, patch_needs(config))


def patch_needs(config) -> dict[str, tuple[bool, str]]:
    """{patch id: (does this plan need it, why)}: the autotune patch for the CUTLASS FP4 MoE
    runner, the NSA fix for a model with DSA attention (model.path's config.json)."""
    target = get_target(config.gpus.target)
    model = read_model_facts(config.model.path)
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


def preflight_rows(
    target, profile: StackProfile | None = None, needs: dict[str, tuple[bool, str]] | None = None
) -> list[CheckRow]:
    """Rows (name, status ok/warn/fail, detail, fix): the installed sglang against the
    profile's pin, then one row per patch. `target` as for patch_report. `needs` (from
    patch_needs): a patch the plan does not need is reported, never a failure."""
    try:
        report = patch_report(target)
    except Glm5Error as exc:
        fix = "install the stack: pip install -r " + (
            str(profile.requirements_path) if profile else "<profile>.txt"
        )
        return [CheckRow("sglang", FAIL, exc.render(), fix)]
    rows = [_version_row(report.install.version, profile)]
    for result in report.results:
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
