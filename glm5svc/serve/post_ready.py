"""The post-READY hook (the post-start benchmark): what it gets, and the thread it runs in.

The hook runs once the service is ready; its result (or its failure) is reported on the
loop's queue as `HookFinished`, and the supervision loop decides what it changes: /status's
"benchmark", the phase, systemd's STATUS. A failed hook never takes the service down.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from glm5svc.config import Config
from glm5svc.records import BenchmarkStatus, PlanSummary
from glm5svc.serve.events import HookFinished
from glm5svc.serve.phases import PRIORITY_WARNING
from glm5svc.serve.state import SupervisorState


@dataclass
class PostReadyContext:
    """What a post-READY hook (the post-start benchmark) gets."""

    config: Config
    engine_url: str
    state: SupervisorState  # read only: the supervision loop is its only writer
    stop_requested: threading.Event
    log: Callable[[str], None]
    sampler: object | None = None  # the service's GPU telemetry sampler, shared
    launch_plan: PlanSummary | None = None  # the summary of the plan this service launched
    api_key: str | None = None  # the key the service read once (for the hook's requests)


# hook(context) -> what /status shows in "benchmark" and /metrics exports
# (glm5svc.benchmark_gauges); its `degraded` marks the service degraded, not unready.
# Exceptions are reported, never fatal.
PostReadyHook = Callable[[PostReadyContext], BenchmarkStatus | None]


def start_post_ready(
    hook: PostReadyHook, context: PostReadyContext, events: queue.SimpleQueue, log
) -> threading.Thread:
    """Run `hook(context)` in a thread of its own; report its result on `events`."""
    thread = threading.Thread(
        target=_run, args=(hook, context, events, log), name="post-ready", daemon=True
    )
    thread.start()
    return thread


def _run(hook: PostReadyHook, context: PostReadyContext, events: queue.SimpleQueue, log) -> None:
    try:
        result = hook(context)
    except Exception as exc:  # a failed benchmark must not take the service down
        result = BenchmarkStatus.failed(f"{type(exc).__name__}: {exc}")
        log(f"post-start benchmark failed: {exc}", PRIORITY_WARNING)
    events.put(HookFinished(result))
