"""A trial's configuration: the operator's, the candidate's settings, private ports; then
validated and rendered by the launch plan, and parsed by the installed sglang itself."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from random import Random
from typing import Any

import yaml

from glm5svc.config import Config, config_from_mapping
from glm5svc.engine_limits import EngineLimitError
from glm5svc.errors import Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.launch_plan import LaunchPlan, plan_for_service
from glm5svc.sglang_flags import GRPC_PORT_OFFSET

SGLANG_PARSER_SCRIPT = Path(__file__).resolve().parents[1] / "data" / "parse_with_sglang.py"
PARSER_TIMEOUT_S = 300.0


# sglang 0.5.11 puts its gRPC port at --port + 10000 and refuses to start when that is past
# 65535 (server_args.py, _handle_deprecated_args): trial ports stay below.
HIGHEST_TRIAL_PORT = 65535 - GRPC_PORT_OFFSET
LOWEST_TRIAL_PORT = 20000


def free_port(random: Random | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago, in the range where
    sglang's derived ports still exist."""
    random = random or Random()
    for _ in range(200):
        port = random.randrange(LOWEST_TRIAL_PORT, HIGHEST_TRIAL_PORT)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Glm5Error(
        f"no free TCP port between {LOWEST_TRIAL_PORT} and {HIGHEST_TRIAL_PORT} for a trial"
    )


def trial_mapping(mapping: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
    """Private ports (a gateway or a client never reaches a trial), the trial's own
    results directory, and no post-start benchmark: the tune measures."""
    result = dict(mapping)
    result["server"] = {**(mapping.get("server") or {}), "port": free_port()}
    result["service"] = {
        **(mapping.get("service") or {}),
        "listen_port": free_port(),
        "results_dir": str(trial_dir / "serve"),
    }
    benchmark = dict(mapping.get("benchmark") or {})
    benchmark["post_start"] = {**(benchmark.get("post_start") or {}), "enabled": False}
    result["benchmark"] = benchmark
    return result


def write_trial_config(mapping: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# A glm5svc tune trial's configuration (written by glm5svc tune).\n"
    path.write_text(header + yaml.safe_dump(mapping, sort_keys=False), encoding="utf-8")


class Renderer:
    """Validates and plans trial configurations with the host facts read once."""

    def __init__(self, facts: HostFacts, check_with_sglang: bool):
        self.facts = facts
        self.check_with_sglang = check_with_sglang

    def plan(self, config: Config) -> LaunchPlan:
        return plan_for_service(config, self.facts)

    def limit_refusal(self, mapping: dict[str, Any]) -> str | None:
        """Why the plan refuses this configuration as an engine that cannot run on this host
        (glm5svc/engine_limits.py), or None (other problems are the trial's to report)."""
        try:
            self.plan(config_from_mapping(mapping, "trial"))
        except EngineLimitError as exc:
            return "; ".join(exc.problems) or str(exc)
        except Glm5Error:
            return None
        return None

    def refusal(self, mapping: dict[str, Any]) -> str | None:
        """Why this configuration cannot run (None: it can)."""
        try:
            config = config_from_mapping(mapping, "trial")
            plan = self.plan(config)
        except Glm5Error as exc:
            return exc.render().replace("\n", " ")
        if self.check_with_sglang and config.server.command is None:
            return sglang_refusal(config, list(plan.argv[3:]))
        return None


def sglang_refusal(config: Config, argv: list[str]) -> str | None:
    """sglang's own parser on the flags (one subprocess in server.python's environment)."""
    env_path = config.server.env.get("PYTHONPATH")
    env = {"PYTHONPATH": env_path} if env_path else {}
    try:
        done = subprocess.run(
            [str(config.server.python), str(SGLANG_PARSER_SCRIPT), json.dumps([argv])],
            capture_output=True,
            text=True,
            timeout=PARSER_TIMEOUT_S,
            env={**os.environ, **env},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sglang's parser could not be run with {config.server.python}: {exc}"
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])["results"][0]
    except (ValueError, IndexError, KeyError, TypeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"sglang's parser failed: {tail[0]}"
    return f"sglang's parser: {result['error']}" if "error" in result else None
