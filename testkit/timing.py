"""How long a harness waits for something that should happen "soon".

scripts/test runs the suite in more workers than the machine has cores, so a process can
wait its turn for the CPU for seconds. GLM5_TEST_TIME_SCALE (scripts/test sets it) stretches
the harness's waits, and the limits a scenario sets from the engine's start-up time (a stall
limit, with the load it must outlast scaled alike), never a ratio a test asserts: a test of
"exits within N seconds" still fails when the code waits for a timeout longer than N.
"""

from __future__ import annotations

import os


def scaled(seconds: float) -> float:
    try:
        factor = float(os.environ.get("GLM5_TEST_TIME_SCALE", "1"))
    except ValueError:
        factor = 1.0
    return seconds * max(1.0, factor)
