"""`glm5svc tune apply`: the tuned overlay into the configuration file, then a restart.

The merged configuration is validated and planned before anything is written; the file
is replaced atomically and the previous one kept beside it (`<file>.before-tune-<time>`).
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from glm5svc.atomic_file import write_atomic
from glm5svc.config import config_from_mapping, resolve_config_path
from glm5svc.config_yaml import ConfigLoader
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.launch_plan import plan_for_service
from glm5svc.tune.guard import UNIT, unit_active
from glm5svc.tune.outputs import TUNED_FILE, read_summary
from glm5svc.tune.session import measured_on, read_mapping
from glm5svc.tune.space import apply_candidate


def overlay_as_candidate(overlay: dict[str, Any]) -> dict[str, Any]:
    candidate: dict[str, Any] = {}
    for key, value in (overlay.get("tuning") or {}).items():
        candidate[f"tuning.{key}"] = value
    args = list((overlay.get("server") or {}).get("extra_args") or [])
    index = 0
    while index < len(args):
        flag = args[index]
        following = args[index + 1] if index + 1 < len(args) else None
        if following is not None and not following.startswith("--"):
            candidate[flag] = following
            index += 2
        else:
            candidate[flag] = True
            index += 1
    return candidate


class MeasuredElsewhere(ConfigError):
    """The tune was measured on other GPUs, another model or another sglang."""


def measured_elsewhere(measured: dict[str, Any] | None, here: dict[str, Any]) -> list[str]:
    """What differs between where a tune measured and this configuration's host."""
    if not measured:
        return ["the tune's summary does not say what it was measured on"]
    labels = {
        "gpu_count": "GPUs",
        "gpu_name": "GPU model",
        "model_path": "model.path",
        "model_architecture": "model",
        "sglang_version": "sglang",
    }
    return [
        f"{label}: measured with {measured.get(key)!r}, this configuration has {here.get(key)!r}"
        for key, label in labels.items()
        if measured.get(key) != here.get(key)
    ]


def _check_measured_here(run_dir: Path, config, force: bool) -> list[str]:
    summary = read_summary(run_dir)  # a tune still running says nothing of where
    differences = measured_elsewhere(
        (summary.get("facts") or {}).get("identity"), measured_on(config, HostFacts.read(config))
    )
    if differences and not force:
        raise MeasuredElsewhere(
            f"{run_dir} was not measured on this configuration's GPUs, model and sglang: "
            "its settings may not hold here. Tune here, or pass --force to apply it anyway",
            problems=differences,
        )
    return [f"applied with --force although {d}" for d in differences]


def apply_tune(
    run_dir: Path, config_arg: str | None, restart: bool, force: bool = False
) -> dict[str, Any]:
    tuned = Path(run_dir) / TUNED_FILE
    try:
        overlay = yaml.load(tuned.read_text(encoding="utf-8"), Loader=ConfigLoader) or {}  # noqa: S506
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError) as exc:
        raise Glm5Error(
            f"{tuned}: not a tune's result ({exc}); run glm5svc tune run first"
        ) from None
    if not isinstance(overlay, dict) or set(overlay) - {"tuning", "server"}:
        raise Glm5Error(f"{tuned}: not a tune's overlay (only tuning: and server.extra_args)")
    path = resolve_config_path(config_arg)
    if not overlay:
        return {
            "config": str(path),
            "changed": {},
            "messages": ["nothing to apply: no setting measured better than the start"],
        }
    original = read_mapping(path)
    forced = _check_measured_here(Path(run_dir), config_from_mapping(original, str(path)), force)
    merged = apply_candidate(original, overlay_as_candidate(overlay))
    config = config_from_mapping(merged, f"{path} with {tuned}")
    try:
        plan_for_service(config)
    except Glm5Error as exc:
        raise ConfigError(f"the tuned configuration does not plan: {exc.render()}") from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.before-tune-{stamp}")
    shutil.copy2(path, backup)
    header = (
        f"# Tuned by `glm5svc tune apply {run_dir}` ({stamp}); the previous file: {backup.name}.\n"
    )
    write_atomic(path, header + yaml.safe_dump(merged, sort_keys=False))
    messages = [*forced, f"wrote {path} (the previous one: {backup})"]
    restarted = False
    if restart:
        if unit_active(UNIT):
            done = subprocess.run(
                ["systemctl", "restart", UNIT], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise Glm5Error(
                    f"systemctl restart {UNIT}: {done.stderr.strip() or 'failed'}; "
                    "the configuration is written"
                )
            restarted = True
            messages.append(f"restarted {UNIT}: it serves with the tuned settings")
        else:
            messages.append(f"{UNIT} is not active: it uses the tuned settings at its next start")
    return {
        "config": str(path),
        "backup": str(backup),
        "changed": overlay,
        "restarted": restarted,
        "messages": messages,
    }
