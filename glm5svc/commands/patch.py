"""`glm5svc patch status|apply|revert|diff|list`: the SM120 sglang patches on a venv.

Target: the service venv (server.python from the config) unless --python PATH or
--site-packages DIR points elsewhere. Patches: all, or the ids given.

Exit status (the same with and without --json):
  0  success: every selected patch has a known verdict; apply/revert did what was asked
     (the JSON's "changed" says whether a file was written: use it for changed_when)
  1  no sglang at the target (no interpreter, not installed, no dist-info)
  2  usage: bad arguments or an unknown patch id
  3  unknown source: a file's code is not what a patch knows (anchor not found exactly
     once); nothing was written
  4  a write failed or the patched code did not compile; the original is untouched
  5  `status --check` only: a required patch is not applied (status is still printed)
  78 the config file (for server.python) is invalid
With --json, stdout is one JSON object even on failure ("ok": false, "error": ...,
"exit_status": ...; glm5svc.json_output).
"""

from __future__ import annotations

import sys
from pathlib import Path

from glm5svc.config import Config, load_config, resolve_config_path
from glm5svc.errors import Glm5Error
from glm5svc.exit_codes import epilog
from glm5svc.json_output import emit, emit_error
from glm5svc.patches.engine import (
    PatchResult,
    UnknownSourceError,
    apply_patch,
    diff_patch,
    refuse_unknown,
    revert_patch,
)
from glm5svc.patches.files import PatchWriteError
from glm5svc.patches.install import SglangNotFound, locate_sglang
from glm5svc.patches.report import PatchReport, patch_report
from glm5svc.patches.spec import load_patches

EXIT_MISSING_REQUIRED = 5


def register(subparsers):
    parser = subparsers.add_parser(
        "patch",
        epilog=epilog("patch"),
        help="status/apply/revert/diff the SM120 sglang patches in the service venv",
        description=__doc__,
        formatter_class=_raw_help(),
    )
    actions = parser.add_subparsers(dest="patch_action", metavar="ACTION", required=True)
    for name, text in (
        ("status", "one verdict per patch"),
        ("apply", "apply the patches that are not applied (idempotent)"),
        ("revert", "restore the original files byte for byte"),
        ("diff", "unified diff of what apply changes or has changed"),
    ):
        action = actions.add_parser(name, help=text, description=text, epilog=epilog("patch"))
        _target_arguments(action)
        action.add_argument("patch_ids", nargs="*", metavar="PATCH", help="default: all")
        action.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "status":
            action.add_argument(
                "--check", action="store_true", help="exit 5 if a required patch is not applied"
            )
    actions.add_parser(
        "list", help="the patches and the sglang versions they cover", epilog=epilog("patch")
    )
    parser.set_defaults(func=run)
    return parser


def _raw_help():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def _target_arguments(parser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--python", metavar="PATH", help="the venv's interpreter")
    where.add_argument("--site-packages", metavar="DIR", help="a site-packages directory")


def run(args) -> int:
    if args.patch_action == "list":
        print(_render_list())
        return 0
    report = patch_report(_target(args), args.patch_ids)
    return _ACTIONS[args.patch_action](args, report)


def _target(args):
    if args.site_packages:
        return locate_sglang(site_packages=Path(args.site_packages))
    if args.python:
        return locate_sglang(python=Path(args.python))
    path = resolve_config_path(args.config)
    config = load_config(path) if path.exists() or args.config else Config()
    try:
        return locate_sglang(python=config.server.python)
    except SglangNotFound as exc:
        raise SglangNotFound(
            f"{exc}, or point patch elsewhere with --python PATH / --site-packages DIR"
        ) from None


def _status(args, report: PatchReport) -> int:
    exit_status = 0
    if report.unknown:
        exit_status = UnknownSourceError.exit_status
    elif args.check and report.missing_required:
        exit_status = EXIT_MISSING_REQUIRED
    _emit(args, report, exit_status=exit_status)
    return exit_status


def _apply(args, report: PatchReport) -> int:
    return _change(args, report, apply_patch)


def _revert(args, report: PatchReport) -> int:
    return _change(args, report, revert_patch)


def _change(args, report: PatchReport, step) -> int:
    try:
        refuse_unknown(report.results)  # all or nothing: check every patch before writing
    except UnknownSourceError as exc:
        _emit(args, report, error=exc)
        return exc.exit_status
    done: list[PatchResult] = []
    try:
        for result in report.results:
            done.append(step(result, report.install))
    except Glm5Error as exc:
        report.results = done + report.results[len(done) :]
        _emit(args, report, error=exc)
        return exc.exit_status
    except OSError as exc:  # any other write or read failure: the same contract, exit 4
        report.results = done + report.results[len(done) :]
        error = PatchWriteError(f"{getattr(exc, 'filename', None) or 'a patch file'}: {exc}")
        _emit(args, report, error=error)
        return error.exit_status
    report.results = done
    _emit(args, report)
    return 0


def _diff(args, report: PatchReport) -> int:
    diffs = {r.patch.id: diff_patch(r) for r in report.results}
    exit_status = UnknownSourceError.exit_status if report.unknown else 0
    if args.json:
        data = report.to_dict()
        for item in data["patches"]:
            item["diff"] = diffs[item["id"]]
        emit(args.json_schema, data, ok=exit_status == 0)
    else:
        for result in report.results:
            print(f"# {result.patch.id}: {result.verdict.value}: {result.detail}")
            sys.stdout.write(diffs[result.patch.id])
    return exit_status


_ACTIONS = {"status": _status, "apply": _apply, "revert": _revert, "diff": _diff}


def _emit(args, report: PatchReport, error: Glm5Error | None = None, exit_status: int = 0) -> None:
    if args.json:
        if error:
            emit_error(args.json_schema, str(error), error.exit_status, error.problems,
                       **report.to_dict())  # fmt: skip
        else:
            emit(args.json_schema, report.to_dict(), ok=exit_status == 0)
        return
    install = report.install
    print(f"sglang {install.version} in {install.site_packages}")
    width = max(len(r.patch.id) for r in report.results) if report.results else 10
    for result in report.results:
        tag = "" if result.action == "none" else f" [{result.action}]"
        print(f"  {result.patch.id:<{width}}  {result.verdict.value}{tag}")
        print(f"  {'':<{width}}  {result.detail}")
    if error:
        print(f"glm5svc: {error.render()}", file=sys.stderr)


def _render_list() -> str:
    lines = []
    for patch in load_patches():
        kind = "required" if patch.required else "optional"
        lines.append(f"{patch.id} ({kind}): {patch.title}")
        for variant in patch.variants:
            lines.append(
                f"  variant {variant.id}: sglang {variant.describe_range()}, {variant.file}"
            )
        if patch.fixed_upstream:
            lines.append(f"  fixed upstream from sglang {patch.fixed_upstream.since}")
        lines.append(f"  why: {patch.why}")
        lines.append(f"  facts: {patch.facts}")
    return "\n".join(lines)
