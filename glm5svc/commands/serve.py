"""`glm5svc serve`: run and supervise the SGLang server (what `systemctl start glm5` runs)."""

from __future__ import annotations

from pathlib import Path

from glm5svc.atomic_file import write_atomic
from glm5svc.bench.post_start import post_start_hook
from glm5svc.config import load_config, read_api_key
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.launch_plan import plan_for_service
from glm5svc.preflight import run_preflight
from glm5svc.redaction import Redactor
from glm5svc.serve.listener import HealthListener
from glm5svc.serve.metrics import build_registry
from glm5svc.serve.notify import Notifier
from glm5svc.serve.phases import PRIORITY_ERR, PRIORITY_WARNING
from glm5svc.serve.relay import choose_sink
from glm5svc.serve.supervisor import Supervisor
from glm5svc.telemetry import Sampler


def register(subparsers):
    parser = subparsers.add_parser(
        "serve",
        help="run the SGLang server under supervision (systemd Type=notify service)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    config = load_config(args.config)
    holder: dict = {}
    sink = choose_sink(lambda: holder["supervisor"].engine.pid if "supervisor" in holder else None)
    notifier = Notifier(on_error=lambda text: sink.message(text, PRIORITY_WARNING))
    if config.service.run_preflight:
        _preflight(config, sink, notifier)
    plan = plan_for_service(config)
    for warning in plan.warnings:
        sink.message(f"launch plan: {warning}", PRIORITY_WARNING)
    _write_secret_files(plan.secret_files)
    api_key = read_api_key(config.server.api_key_file)
    redactor = Redactor.for_service(api_key, config.server.env, config.server.secret_env)
    sampler = _telemetry_sampler(config, sink)
    supervisor = Supervisor(
        config,
        argv=list(plan.argv),
        plan_env=dict(plan.env),
        sink=sink,
        notifier=notifier,
        plan_summary=plan.summary(),
        plan_warnings=list(plan.warnings),
        post_ready_hook=post_start_hook if config.benchmark.post_start.enabled else None,
        api_key=api_key,
        telemetry_sampler=sampler,
        redactor=redactor,
    )
    holder["supervisor"] = supervisor
    listener = _start_listener(config, supervisor, sampler, sink)
    supervisor.listener = listener
    try:
        return supervisor.run()
    finally:
        listener.stop()
        if sampler is not None:
            sampler.stop()


def _preflight(config, sink, notifier) -> None:
    notifier.status("preflight checks")
    report = run_preflight(config)
    text = report.render()
    for line in text.splitlines():
        sink.message(line, PRIORITY_ERR if report.has_failures else 6)
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


def _start_listener(config, supervisor, sampler, sink) -> HealthListener:
    service = config.service
    registry = build_registry(supervisor.state, sampler)
    try:
        listener = HealthListener(
            supervisor.state, registry, service.listen_host, service.listen_port
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


def _telemetry_sampler(config, sink):
    """One GPU telemetry sampler for /metrics and the post-start benchmark's windows."""
    if not config.telemetry.enabled:
        return None
    try:
        return Sampler.from_config(config.telemetry).start()
    except Exception as exc:  # telemetry is optional; the service runs without it
        sink.message(f"GPU telemetry unavailable: {exc}", PRIORITY_WARNING)
        return None
