"""The tune against its peer on the H200, from what the device runs recorded.

    python -m lab.gpu.comparison FOLDER     # writes FOLDER/comparison.json, prints it

FOLDER holds one sub-folder per device run, as `scripts/gpu-lab remote` left them
(results.json, the recorded files): `peer` (sglang.auto_benchmark), `tune-<start>` and,
where the confirming start of a tune ran in a resumed run, `tune-<start>-confirm`.
Each run's row: its wall time, when its final pick was decided (from the command's start),
its engine starts, its pick, whether a confirming start confirmed it, the plan's
prediction, and the largest cached share of a measured window.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LIVE = "tuning.max_running_requests"
GRAPHS = "tuning.cuda_graph"


def _tune_summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "tune-run" / "summary.json").read_text())


def _starts(summary: dict[str, Any]) -> set[int]:
    return {t["start"] for t in summary["trials"] if t.get("start") is not None}


def _cached_share(folder: Path) -> float:
    shares = [
        json.loads(path.read_text()).get("cached_share") or 0.0
        for path in (folder / "tune-run").glob("*/*/runs/*.json")  # starts/ (trials/ before)
    ]
    return max(shares, default=0.0)


def _pick(summary: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    best = next(t for t in summary["trials"] if t["best"])
    setting = dict(start)
    for part in best["setting"].split(", "):
        name, _, value = part.partition("=")
        if name == "max_running_requests":
            setting["max_running_requests"] = int(value)
        elif name == "cuda_graph":
            setting["cuda_graph"] = value == "on"
    return setting


def _confirmation(summary: dict[str, Any]) -> str:
    """What the confirming start showed, in words (older summaries: `confirmation`)."""
    return summary.get("confirmation_detail") or summary["confirmation"]


def tune_row(folder: Path, confirm: Path | None) -> dict[str, Any]:
    results = json.loads((folder / "results.json").read_text())["tune"]
    summary = _tune_summary(folder)
    start = results["starting_settings"]
    row = {
        "tool": "glm5svc",
        "start": results["start"],
        "wall_s": summary["timeline"]["wall_s"],
        "decided_s": summary["timeline"]["decided_s"],
        "starts": len(_starts(summary)),
        "pick": _pick(summary, start),
        "confirmed": summary["confirmed"],
        "confirmation": _confirmation(summary),
        "plan_s": summary["plan"]["total_s"],
        "max_cached_share": _cached_share(folder),
    }
    if confirm is not None:  # the confirming start ran in a resumed run of the same study
        resumed = _tune_summary(confirm)
        row.update(
            wall_s=round(row["wall_s"] + resumed["timeline"]["wall_s"], 1),
            starts=len(_starts(resumed)),
            pick=_pick(resumed, start),
            confirmed=resumed["confirmed"],
            confirmation=_confirmation(resumed) + " (in a resumed run)",
            max_cached_share=max(row["max_cached_share"], _cached_share(confirm)),
        )
    row["plan_error"] = round(row["wall_s"] / row["plan_s"] - 1, 3) if row["plan_s"] else None
    return row


def peer_row(folder: Path) -> dict[str, Any]:
    results = json.loads((folder / "results.json").read_text())["peer"]
    return {
        "tool": "auto_benchmark",
        "start": results["start"],
        "wall_s": results["wall_s"],
        "decided_s": results["wall_s"],  # it picks once every candidate has run
        "starts": len(results["candidates"]),
        "pick": results["pick"],
        "confirmed": None,
        "candidates": results["candidates"],
    }


def comparison(folder: Path) -> dict[str, Any]:
    runs = [peer_row(folder / "peer")] if (folder / "peer").is_dir() else []
    for tune in sorted(folder.glob("tune-*")):
        if tune.name.endswith("-confirm"):
            continue
        confirm = tune.with_name(tune.name + "-confirm")
        runs.append(tune_row(tune, confirm if confirm.is_dir() else None))
    return {"runs": runs}


def main() -> None:
    folder = Path(sys.argv[1])
    text = json.dumps(comparison(folder), indent=2) + "\n"
    (folder / "comparison.json").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
