"""Every command's exit statuses, in one table: each command's --help ends with its own
(`epilog`), docs/cli.md lists them (glm5svc.docgen), and tests/common/test_exit_codes.py
checks them against the codes the commands return and the errors they raise."""

from __future__ import annotations

# Every command: a usage error, an interrupt, an unexpected glm5svc error.
COMMON = (
    (1, "an error, named on stderr (and in the JSON output)"),
    (2, "the command line is wrong (the option is named)"),
    (130, "interrupted (^C)"),
)
CONFIG = (78, "the configuration or an input is refused (file, key, cause and fix named)")

EXIT_CODES: dict[str, tuple[tuple[int, str], ...]] = {
    "validate": ((0, "the configuration is valid"), CONFIG),
    "command": ((0, "the plan printed"), CONFIG),
    "rules": ((0, "the rules printed"), CONFIG),
    "preflight": ((0, "no check failed"), (1, "a check failed"), CONFIG),
    "serve": (
        (0, "stopped cleanly (drained)"),
        (1, "the engine failed, and a restart may help"),
        (78, "a restart cannot help (bad configuration, the port held, a diagnosis that says so)"),
    ),
    "status": (
        (0, "ready (the fleet view: every replica ready and in the gateway)"),
        (1, "not ready (the fleet view: a replica not ready or not in the gateway)"),
        (
            3,
            "unreachable: nothing listens, the service is not running (the fleet view: "
            "the gateway)",
        ),
        (4, "the answer is not a glm5svc status (another program on the port)"),
        CONFIG,
    ),
    "bench": (
        (0, "done"),
        (1, "the ladder stopped early (server died, requests failed, bench_serving failed)"),
        (3, "the regression gate: a judged regression, or a gate that cannot judge"),
        CONFIG,
    ),
    "bench compare": (
        (0, "compared (without the gate, whatever the verdict)"),
        (
            3,
            "the regression gate: A regressed, or the gate cannot judge (no common figure, "
            "another workload, no figure judged)",
        ),
        CONFIG,
    ),  # fmt: skip
    "night": ((2, "no action given (plan, begin, resume, status, report or stop)"),),
    "night plan": ((0, "the plan printed"), CONFIG),
    "night begin": (
        (0, "the night's folder made and glm5-tune.service started"),
        (75, "another `glm5svc night` process holds the night's lock"),
        CONFIG,
    ),
    "night resume": (
        (
            0,
            "the night ran to its end (tuned, unchanged, rolled back or stopped: the report), "
            "or one whose state or configuration cannot be read was ended (the evening's back)",
        ),
        (
            1,
            "the outcome could not be recorded (the report on stderr), or glm5.service does "
            "not serve after the evening's configuration was put back",
        ),
        (75, "another `glm5svc night` process holds the night's lock"),
        CONFIG,
    ),
    "night fallback": (
        (
            0,
            "the evening's configuration back and glm5.service serving (or another night "
            "process holds the lock and ends the night itself)",
        ),
        (1, "glm5.service does not serve after it, or the outcome could not be recorded"),
    ),
    "night status": ((0, "the night shown"), CONFIG),
    "night report": ((0, "the report printed"), CONFIG),
    "night stop": ((0, "glm5-tune.service stopped (the night puts the evening back)"), CONFIG),
    "tune": ((2, "no action given (run, apply or show)"),),
    "tune run": (
        (0, "done (a best found or not)"),
        (1, "nothing was measured"),
        (
            75,
            "the engine's port is held (a serving glm5.service: take it over; else its pid)",
        ),
        (78, "refused before it started (configuration, space, options, plan over budget)"),
        (143, "ended by SIGTERM (128 + the signal); a resume continues it"),
    ),
    "tune apply": (
        (0, "applied (or nothing to change)"),
        (1, "the service could not be restarted (the file is written, the backup named)"),
        (78, "refused: the run's overlay unconfirmed or measured elsewhere, or a bad file"),
    ),
    "tune show": ((0, "shown"), CONFIG),
    "telemetry": (
        (0, "done"),
        (69, "NVML cannot be used (no NVIDIA driver, no library, no GPU): EX_UNAVAILABLE"),
        CONFIG,
    ),
    "patch": (
        (0, "every selected patch has a known verdict; apply/revert did what was asked"),
        (1, "no sglang at the target"),
        (3, "unknown source: a file's code is not what a patch knows; nothing written"),
        (4, "a write failed or the patched code did not compile; the original untouched"),
        (5, "the status check: a required patch is not applied"),
        CONFIG,
    ),
    "provision": (
        (0, "done"),
        (1, "no host matched, or ansible-runner could not start the playbook"),
        (2, "a host failed (ansible-playbook's status, as are the others it returns)"),
        (4, "a host was unreachable"),
        CONFIG,
    ),
    "unit": ((0, "the unit printed"), CONFIG),
    "completion": ((0, "the script printed"),),
}


def codes_of(command: str) -> tuple[tuple[int, str], ...]:
    """The command's own statuses, then the ones every command shares (not repeated)."""
    own = EXIT_CODES[command]
    mine = {code for code, _ in own}
    return own + tuple(row for row in COMMON if row[0] not in mine)


def epilog(command: str) -> str:
    """The exit statuses for the end of `glm5svc COMMAND --help`."""
    return "exit status: " + "; ".join(f"{code} {what}" for code, what in codes_of(command))
