"""Which failed trials failed for a reason outside the candidate, and are tried once more:
a port another process took, GPU memory another process held, a timeout. A candidate that
crashes the engine by itself (out of memory with the GPUs free, a refused flag) is not."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

# serve's diagnosis (glm5svc/serve/diagnosis.py) and the engine's own words for a port clash.
_PORT_CLASH = re.compile(
    r"The engine port is taken by another process|Address already in use"
    r"|port \d+ is held by another process",
    re.IGNORECASE,
)
_TIMEOUT = re.compile(r"not ready within the trial's time limit|timed out|Timeout", re.IGNORECASE)
FIRST_ATTEMPT_DIR = "first-attempt"


def outside_the_candidate(
    status: str, failure: str | None, diagnosis: list[str], held: str | None, log_text: str
) -> str | None:
    """Why this failure is not the candidate's (then it is tried again), else None."""
    if status != "failed":
        return None
    text = "\n".join([failure or "", *diagnosis])
    if _PORT_CLASH.search(text) or _PORT_CLASH.search(log_text):
        return "a port clash"
    if held:
        return f"GPU memory held by another process ({held})"
    if _TIMEOUT.search(text):
        return "a timeout"
    return None


def keep_first_attempt(trial_dir: Path) -> Path:
    """Move the first attempt's files aside, so the retry writes the trial's own."""
    aside = trial_dir / FIRST_ATTEMPT_DIR
    aside.mkdir(parents=True, exist_ok=True)
    for item in list(trial_dir.iterdir()):
        if item.name != FIRST_ATTEMPT_DIR:
            shutil.move(str(item), str(aside / item.name))
    return aside
