"""Secrets that must not reach logs, status pages or result files, and their redaction.

sglang prints its whole `server_args=ServerArgs(..., api_key='...')` at start, so every
line relayed from the engine passes through `Redactor.redact`. A value is secret when it
is the API key, a `server.env` value whose variable is listed in `server.secret_env`, is
named like a credential (KEY, TOKEN, SECRET, PASSWORD, ...), or looks like a token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"
MIN_SECRET_LEN = 4
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|PRIVATE", re.IGNORECASE)
_TOKEN_PREFIX = re.compile(r"^(hf_|sk-|ghp_|gho_|github_pat_|xox[abp]-|glpat-|AKIA)")
# `name='value'` / `name="value"` for names such as api_key, admin_api_key, hf_token.
_NAMED_VALUE = re.compile(
    r"""(\b\w*(?:api_key|token|secret|password)\w*\s*[=:]\s*)"""
    r"""('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""",
    re.IGNORECASE,
)


def looks_like_token(value: str) -> bool:
    """Long, unspaced, mixed letters and digits (not a path or a number), or a known prefix."""
    if _TOKEN_PREFIX.match(value):
        return True
    if len(value) < 16 or any(c.isspace() for c in value) or "/" in value:
        return False
    return any(c.isalpha() for c in value) and any(c.isdigit() for c in value)


def secret_env_names(env: Mapping[str, str], marked: Iterable[str] = ()) -> list[str]:
    marked = set(marked)
    return [
        name
        for name, value in env.items()
        if name in marked or _SECRET_NAME.search(name) or looks_like_token(value)
    ]


class Redactor:
    """Replaces each secret (as written, as Python repr and as JSON escape it) with a marker."""

    def __init__(self, secrets: Iterable[str | None]):
        forms: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET_LEN:
                continue
            forms |= {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}
        self.forms = sorted(forms, key=len, reverse=True)
        self._exact = re.compile("|".join(map(re.escape, self.forms))) if self.forms else None

    @classmethod
    def for_service(
        cls, api_key: str | None, env: Mapping[str, str], marked: Iterable[str] = ()
    ) -> Redactor:
        return cls([api_key, *(env[name] for name in secret_env_names(env, marked))])

    def redact(self, text: str) -> str:
        if self._exact is not None:
            text = self._exact.sub(REDACTED, text)
        if "=" in text or ":" in text:
            text = _NAMED_VALUE.sub(lambda m: f"{m.group(1)}'{REDACTED}'", text)
        return text

    def redact_cut(self, text: str) -> str:
        """For a line cut short: also hide a secret's beginning left at the very end."""
        text = self.redact(text)
        for form in self.forms:
            for keep in range(len(form) - 1, MIN_SECRET_LEN - 1, -1):
                if text.endswith(form[:keep]):
                    return text[:-keep] + REDACTED
        return text
