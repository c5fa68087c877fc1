#!/usr/bin/env python3
"""Download a Hugging Face model snapshot to a host directory, resumable (glm5_host_lxc_resources).

Progress (huggingface_hub's bars) goes to --log; the last stdout line is JSON:
{"changed": bool, "files": N, "bytes": N, "path": DIR}. Exit 2: the hub is unreachable;
3: the repository is unknown, gated or the token is refused. The token is read from
--token-file and never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

UNREACHABLE, REFUSED = 2, 3


def snapshot(dest: Path) -> dict[str, int]:
    if not dest.is_dir():
        return {}
    return {
        str(path.relative_to(dest)): path.stat().st_size
        for path in dest.rglob("*")
        if path.is_file() and ".cache" not in path.relative_to(dest).parts
    }


def unreachable(error: BaseException) -> bool:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    seen = error
    while seen is not None:
        name = type(seen).__name__
        if isinstance(seen, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError)):
            return True
        if "Connect" in name or "Timeout" in name:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--dest", required=True, type=Path)
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError as exc:
        print(f"huggingface_hub is not installed in {sys.executable}: {exc}", file=sys.stderr)
        return 1
    token = args.token_file.read_text(encoding="utf-8").strip() if args.token_file else None
    before = snapshot(args.dest)
    if args.log:
        args.log.parent.mkdir(parents=True, exist_ok=True)
        sys.stderr = open(args.log, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    try:
        snapshot_download(
            repo_id=args.repo, revision=args.revision, local_dir=args.dest,
            token=token or None, max_workers=args.workers,
        )  # fmt: skip
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        print(
            f"{endpoint} refused {args.repo}@{args.revision} ({type(exc).__name__}): check the "
            "repository id, accept its licence on the hub, and give a token with read access "
            "(glm5_host_lxc_resources_model_hf_token_file)",
            file=sys.__stderr__,
        )
        return REFUSED
    except Exception as exc:
        if not unreachable(exc):
            raise
        print(
            f"cannot reach the Hugging Face hub at {endpoint} ({type(exc).__name__}): download "
            f"{args.repo} on a machine with access and copy it to {args.dest} on this host, or "
            "point glm5_host_lxc_resources_model_hf_endpoint (HF_ENDPOINT) at a reachable mirror",
            file=sys.__stderr__,
        )
        return UNREACHABLE
    after = snapshot(args.dest)
    result = {
        "changed": after != before,
        "files": len(after),
        "bytes": sum(after.values()),
        "path": str(args.dest),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
