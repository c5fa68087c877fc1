"""The service, wired in one place: `build_service(config)` is what `glm5svc serve` runs and
what the fault tests start.

TGI's launcher is the model: the workers (the engine's output reader, the probes, the
post-start hook, the signal handlers) report on one queue and one loop decides
(glm5svc.serve.supervisor). Everything is built in order, each part from what is already
built, so nothing reaches back to a part that does not exist yet: the log sink first (every
part logs), the host's facts (read once: preflight and the plan share them), preflight, the
launch plan and its secret files, the telemetry sampler, the supervisor, then the health
listener on the supervisor's state. The loop's heartbeat is in that state, so the listener
needs nothing else.

    service = build_service(config, post_ready_hook=post_start_hook)
    exit_status = service.run()
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.config import Config
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.launch_plan import LaunchPlan, plan_for_service
from glm5svc.preflight.run import run_preflight
from glm5svc.serve.listener import HealthListener
from glm5svc.serve.metrics import NightFiles, build_registry
from glm5svc.serve.notify import Notifier
from glm5svc.serve.phases import PRIORITY_ERR, PRIORITY_INFO, PRIORITY_WARNING
from glm5svc.serve.post_ready import PostReadyHook
from glm5svc.serve.process import Launch
from glm5svc.serve.relay import choose_sink
from glm5svc.serve.supervisor import Supervisor
from glm5svc.telemetry import Sampler

# /livez fails when the supervision loop has not turned for this long.
LOOP_STALE_AFTER_S = 30.0


@dataclass
class Service:
    supervisor: Supervisor
    listener: HealthListener
    sampler: Sampler | None
    plan: LaunchPlan  # what the supervisor launches

    def run(self) -> int:
        """Supervise until the engine ends or a stop signal; then stop the listener and
        the sampler, whatever happened."""
        try:
            return self.supervisor.run()
        finally:
            self.stop()

    def stop(self) -> None:
        self.listener.stop()
        if self.sampler is not None:
            self.sampler.stop()


def build_service(
    config: Config,
    *,
    post_ready_hook: PostReadyHook | None = None,
    facts: HostFacts | None = None,
    sink=None,
    loop_stale_after_s: float = LOOP_STALE_AFTER_S,
    config_sha256: str | None = None,
) -> Service:
    """Everything `glm5svc serve` runs, ready to run. `facts`: the host's, if already read
    (else read here, once); `sink`: where messages go (else the journal or stderr);
    `config_sha256`: the configuration file's, shown in /status (launch_plan)."""
    sink = sink or choose_sink()
    notifier = Notifier(on_error=lambda text: sink.message(text, PRIORITY_WARNING))
    facts = facts or HostFacts.read(config)
    if config.service.run_preflight:
        _preflight(config, facts, sink, notifier)
    plan = plan_for_service(config, facts)
    for warning in plan.warnings:
        sink.message(f"launch plan: {warning}", PRIORITY_WARNING)
    _write_secret_files(plan.secret_files)
    launch = Launch(
        argv=list(plan.argv),
        env=dict(plan.env),
        summary=replace(plan.summary(), config_sha256=config_sha256),
        warnings=tuple(plan.warnings),
        api_key=facts.api_key(),
    )
    sampler = _telemetry_sampler(config, sink)
    supervisor = Supervisor(config, launch, sink, notifier, post_ready_hook, sampler)
    try:
        listener = _start_listener(config, supervisor, sampler, sink, loop_stale_after_s)
    except BaseException:
        if sampler is not None:
            sampler.stop()
        raise
    return Service(supervisor, listener, sampler, plan)


def _preflight(config: Config, facts: HostFacts, sink, notifier: Notifier) -> None:
    notifier.status("preflight checks")
    report = run_preflight(config, facts)
    for line in report.render().splitlines():
        sink.message(line, PRIORITY_ERR if report.has_failures else PRIORITY_INFO)
    if report.has_failures:
        notifier.status("preflight failed: configuration or host must be fixed")
        raise ConfigError("preflight found fatal problems (listed above); fix them and restart")


def _write_secret_files(files: dict) -> None:
    """Files the plan needs at launch (sglang's --config with the API key): 0600, atomic."""
    for path, content in files.items():
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(path, content, mode=0o600)
        except OSError as exc:
            raise ConfigError(f"cannot write {path} for the server: {exc.strerror}") from None


def _start_listener(
    config: Config, supervisor: Supervisor, sampler, sink, loop_stale_after_s: float
) -> HealthListener:
    service = config.service
    registry = build_registry(supervisor.state, sampler, NightFiles(config.service.results_dir))
    try:
        listener = HealthListener(
            supervisor.state,
            registry,
            service.listen_host,
            service.listen_port,
            loop_stale_after_s=loop_stale_after_s,
        )
    except OSError as exc:
        raise Glm5Error(
            f"cannot listen on {service.listen_host}:{service.listen_port} for /livez /readyz "
            f"/status /metrics: {exc.strerror}; is another glm5svc serve running? "
            "(service.listen_port)"
        ) from None
    listener.start()
    host, port = listener.address
    sink.message(f"health listener on http://{host}:{port} (/livez /readyz /status /metrics)")
    return listener


def _telemetry_sampler(config: Config, sink):
    """One GPU telemetry sampler for /metrics and the post-start benchmark's windows."""
    if not config.telemetry.enabled:
        return None
    try:
        return Sampler.from_config(config.telemetry).start()
    except Exception as exc:  # telemetry is optional; the service runs without it
        sink.message(f"GPU telemetry unavailable: {exc}", PRIORITY_WARNING)
        return None
