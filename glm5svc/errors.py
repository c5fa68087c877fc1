"""Errors that end a command with a clear message and a meaningful exit status."""

from __future__ import annotations

from typing import Any

# sysexits.h EX_CONFIG: systemd's RestartPreventExitStatus=78 stops restart loops on it.
EXIT_CONFIG = 78


class Glm5Error(Exception):
    """An error whose message is for the user; no traceback is shown."""

    exit_status = 1

    def __init__(
        self,
        message: str,
        problems: list[str] | None = None,
        fields: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.problems = list(problems or [])
        # The command's own fields, kept beside error/exit_status/problems in --json.
        self.fields = dict(fields or {})

    def render(self) -> str:
        lines = [str(self)]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


class ConfigError(Glm5Error):
    """The configuration (file, flag or environment) is wrong: exit 78."""

    exit_status = EXIT_CONFIG
