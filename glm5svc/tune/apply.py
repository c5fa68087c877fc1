"""`glm5svc tune apply`: the tuned overlay into the configuration file, then a restart.

The overlay (tuned.yaml) is read with the configuration's strict reader and checked for
its shape; the merged configuration is validated and planned before anything is written.
The file is edited as a round trip (ruamel.yaml): its comments, order and quoting stay,
only the tuned keys change, and the text written is read back to prove it holds exactly
the merged configuration that is reported. A symlinked configuration is written through
(its target changes, the link stays). The previous file is kept beside the target
(`<file>.before-tune-<time>`); both are written atomically (temporary file in the same
folder, fsync, rename). When the disk is full, read-only or not writable, nothing is left
behind and the message says what to free or fix.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from glm5svc.atomic_file import write_atomic
from glm5svc.config import TuningSection, config_from_mapping, resolve_config_path
from glm5svc.config_yaml import parse_yaml, read_config_bytes
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.launch_plan import plan_for_service
from glm5svc.sglang_flags import parse_extra_args
from glm5svc.tune.applied import HEADER_START
from glm5svc.tune.confirmation import refusal
from glm5svc.tune.guard import UNIT, unit_active
from glm5svc.tune.outputs import STUDY_FILE, SUMMARY_FILE, TUNED_FILE, read_summary
from glm5svc.tune.session import measured_on
from glm5svc.tune.space import apply_candidate


def read_overlay(run_dir: Path) -> dict[str, Any]:
    """tuned.yaml: `tuning:` keys of the configuration and `server: {extra_args: [...]}`."""
    tuned = Path(run_dir) / TUNED_FILE
    fix = f"run `glm5svc tune run` for {run_dir}, or give the run directory it wrote"
    try:
        document = parse_yaml(read_config_bytes(tuned), str(tuned))
    except FileNotFoundError:
        raise ConfigError(f"{tuned}: no such file: not a tune's run directory; {fix}") from None
    except OSError as exc:
        raise ConfigError(f"{tuned}: cannot read: {exc.strerror or exc}; {fix}") from None
    overlay = document.data if document.data is not None else {}
    problems = overlay_problems(overlay)
    if problems:
        lines = [document.line_of(p.split(":")[0].split(".")) for p in problems]
        located = [f"line {n}: {p}" if n else p for n, p in zip(lines, problems, strict=True)]
        raise ConfigError(f"{tuned}: not a tune's overlay; {fix}", problems=located)
    return overlay


def overlay_problems(overlay: Any) -> list[str]:
    """Why `overlay` is not what tune writes (empty when it is)."""
    if not isinstance(overlay, dict):
        return ["(top level): must be a mapping with tuning: and server: {extra_args: [...]}"]
    problems = [
        f"{key}: unknown key; a tune's overlay holds only tuning and server.extra_args"
        for key in overlay
        if key not in ("tuning", "server")
    ]
    tuning = overlay.get("tuning", {})
    if not isinstance(tuning, dict):
        problems.append("tuning: must be a mapping of tuning keys, e.g. max_running_requests: 64")
    else:
        problems += [
            f"tuning.{key}: not a key of the configuration's tuning section"
            for key in tuning
            if key not in TuningSection.model_fields
        ]
    server = overlay.get("server", {})
    if not isinstance(server, dict) or set(server) - {"extra_args"}:
        problems.append("server: must hold extra_args only, e.g. {extra_args: [--flag, value]}")
    else:
        args = server.get("extra_args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            problems.append("server.extra_args: must be a list of strings (flags and values)")
        else:
            try:
                parse_extra_args(args)
            except ConfigError as exc:
                problems.append(str(exc))
    return problems


def overlay_as_candidate(overlay: dict[str, Any]) -> dict[str, Any]:
    candidate: dict[str, Any] = {}
    for key, value in (overlay.get("tuning") or {}).items():
        candidate[f"tuning.{key}"] = value
    args = (overlay.get("server") or {}).get("extra_args") or []
    for flag, values in parse_extra_args(list(args)):
        candidate[flag] = values[0] if values else True
    return candidate


def _round_trip(preserve_quotes: bool = True) -> YAML:
    rt = YAML(typ="rt")
    rt.preserve_quotes = preserve_quotes
    rt.width = 4096
    rt.indent(mapping=2, sequence=4, offset=2)
    return rt


def edited_text(text: str, merged: dict[str, Any], header: str) -> str:
    """`text` with the tuning section and server.extra_args of `merged`, comments kept."""
    rt = _round_trip()
    try:
        document = rt.load(text)
        if isinstance(document, CommentedMap) and document.fa.flow_style():
            # A JSON-style file: written as YAML's block style, quotes only where needed.
            rt = _round_trip(preserve_quotes=False)
            document = rt.load(text)
            _block_style(document)
    except YAMLError as exc:  # parse_yaml read it already; this would be a ruamel quirk
        raise ConfigError(f"the configuration cannot be edited in place: {exc}") from None
    if document is None:
        document = CommentedMap()
    for section in ("tuning", "server"):
        wanted = merged.get(section)
        if not isinstance(wanted, dict):
            continue
        if not isinstance(document.get(section), dict):
            document[section] = CommentedMap()
        keys = (
            wanted
            if section == "tuning"
            else {k: wanted[k] for k in ("extra_args",) if k in wanted}
        )
        for key, value in keys.items():
            if key not in document[section] or document[section][key] != value:
                document[section][key] = value
    out = io.StringIO()
    rt.dump(document, out)
    body = out.getvalue()
    lines = body.splitlines(keepends=True)
    if lines and lines[0].startswith(HEADER_START):
        body = "".join(lines[1:])
    return header + body


def _block_style(node: Any) -> None:
    """One key or item a line, all the way down (the round trip keeps flow style, which for
    a whole JSON-style file is one line of hundreds of characters)."""
    if isinstance(node, CommentedMap | CommentedSeq):
        node.fa.set_block_style()
        for child in node.values() if isinstance(node, CommentedMap) else node:
            _block_style(child)


def changed_keys(original: dict[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    """What the write changes, as an overlay: the keys whose value differs."""
    changed: dict[str, Any] = {}
    tuning_before = original.get("tuning") or {}
    for key, value in (merged.get("tuning") or {}).items():
        if key not in tuning_before or tuning_before[key] != value:
            changed.setdefault("tuning", {})[key] = value
    args_before = (original.get("server") or {}).get("extra_args") or []
    args_after = (merged.get("server") or {}).get("extra_args") or []
    if args_before != args_after:
        changed["server"] = {"extra_args": args_after}
    return changed


def disk_problem(exc: OSError, folder: Path, size: int) -> str:
    """What to free or fix when the configuration's folder cannot take the new files."""
    if exc.errno == errno.ENOSPC:
        return (
            f"no space left on the file system of {folder}: free at least {2 * size} bytes "
            "there (the backup and the new file) and apply again"
        )
    if exc.errno == errno.EROFS:
        return (
            f"{folder} is on a read-only file system: remount it read-write, or apply to a "
            "writable copy with --config"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"cannot write in {folder}: permission denied; run as the user that owns it "
            "(sudo), or give this user write access to the folder"
        )
    return f"cannot write in {folder}: {exc.strerror or exc}"


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


class NotConfirmed(ConfigError):
    """The tune's best is not confirmed by a fresh engine start: there is nothing to apply."""


def refused_by_confirmation(run_dir: Path) -> None:
    """Raises NotConfirmed unless the run's summary says its best was confirmed (or that
    nothing measured better than the start) and that confirmation tested exactly the
    overlay tuned.yaml holds: what happened and what would confirm it."""
    if not (run_dir / SUMMARY_FILE).exists() and (run_dir / STUDY_FILE).exists():
        summary: dict[str, Any] = {}  # a tune that has not finished: refused below
    else:
        summary = read_summary(run_dir)
    why = refusal(summary, str(run_dir), exact=False)
    if why is None:  # the outcome allows it: tuned.yaml must be what was confirmed
        why = refusal(summary, str(run_dir), read_overlay(run_dir))
    if why is not None:
        raise NotConfirmed(f"{run_dir}: {why}")


def already_applied(path: Path, text: str, run_dir: Path) -> dict[str, Any]:
    """The configuration holds every tuned value already: nothing is written, backed up or
    restarted."""
    first = text.split("\n", 1)[0]
    by = " (by `tune apply` of this run)" if first.startswith(f"{HEADER_START} {run_dir}`") else ""
    return {
        "config": str(path),
        "changed": {},
        "already_applied": True,
        "restarted": False,
        "messages": [
            f"already applied: {path} holds every setting of {run_dir}{by}; nothing written, "
            "no backup made, glm5.service not restarted"
        ],
    }


def apply_tune(
    run_dir: Path, config_arg: str | None, restart: bool, force: bool = False
) -> dict[str, Any]:
    refused_by_confirmation(Path(run_dir))
    overlay = read_overlay(run_dir)
    tuned = Path(run_dir) / TUNED_FILE
    path = resolve_config_path(config_arg)
    target = Path(os.path.realpath(path))  # a symlink is written through
    if not overlay:
        return {
            "config": str(path),
            "changed": {},
            "messages": ["nothing to apply: no setting measured better than the start"],
        }
    try:
        text = read_config_bytes(target, str(path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror or exc}") from None
    original = parse_yaml(text, str(path)).data or {}
    if not isinstance(original, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    forced = _check_measured_here(Path(run_dir), config_from_mapping(original, str(path)), force)
    merged = apply_candidate(original, overlay_as_candidate(overlay))
    if not changed_keys(original, merged):
        return already_applied(path, text, run_dir)
    config = config_from_mapping(merged, f"{path} with {tuned}")
    try:
        plan_for_service(config)
    except Glm5Error as exc:
        raise ConfigError(f"the tuned configuration does not plan: {exc.render()}") from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = target.with_name(f"{target.name}.before-tune-{stamp}")
    header = f"{HEADER_START} {run_dir}` ({stamp}); the previous file: {backup.name}.\n"
    new_text = edited_text(text, merged, header)
    written = parse_yaml(new_text, str(path)).data
    if written != merged:  # what is reported is what the file holds, or nothing is written
        raise Glm5Error(f"{path}: the edited file would not hold the tuned settings; not written")
    mode = target.stat().st_mode & 0o7777
    try:
        write_atomic(backup, text, mode=mode)
        try:
            write_atomic(target, new_text, mode=mode)
        except BaseException:
            backup.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise Glm5Error(
            f"{path}: not changed: {disk_problem(exc, target.parent, len(new_text))}"
        ) from None
    where = f"{path} (through the link to {target})" if target != Path(path) else str(path)
    messages = [*forced, f"wrote {where} (the previous one: {backup})"]
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
        "written": str(target),
        "backup": str(backup),
        "changed": changed_keys(original, merged),
        "restarted": restarted,
        "messages": messages,
    }
