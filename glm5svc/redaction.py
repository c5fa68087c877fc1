"""Secrets that must not reach logs, status pages or result files, and their redaction.

sglang prints its whole `server_args=ServerArgs(..., api_key='...')` at start, so every
line relayed from the engine passes through `Redactor.redact`. Redaction goes by value and
by known secret field, never by a word inside a field name (sglang's `tokenizer_path`,
`tokenizer_mode` and `max_total_tokens` are what a diagnosis needs):

- by value: the API key, and each `server.env` value whose variable is listed in
  `server.secret_env`, is named like a credential (one of its `_`-separated words is KEY,
  TOKEN, SECRET, PASSWORD, ...: `HF_TOKEN`, not `TOKENIZERS_PARALLELISM`), or looks like a
  token; wherever it appears, however it is quoted;
- by field: the value of `api_key`, `admin_api_key` and `ssl_keyfile_password` (sglang's
  `ServerArgs` fields that hold secrets, as its `server_args=ServerArgs(...)` line prints
  them in 0.5.10 and 0.5.11) and of each secret `server.env` variable, written `name='v'`,
  `name="v"`, `name: v` or `"name": "v"`, even when the value itself is unknown here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"
MIN_SECRET_LEN = 4
# Words of an environment variable's name that make its value a secret.
_SECRET_WORDS = frozenset(
    "KEY APIKEY TOKEN SECRET PASSWORD PASSWD PASS CREDENTIAL CREDENTIALS AUTH PRIVATE".split()
)
# sglang ServerArgs fields holding secrets (its server_args line, 0.5.10.post1 and 0.5.11).
SECRET_FIELDS = ("api_key", "admin_api_key", "ssl_keyfile_password")
_TOKEN_PREFIX = re.compile(r"^(hf_|sk-|ghp_|gho_|github_pat_|xox[abp]-|glpat-|AKIA)")


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
        if name in marked or _secret_name(name) or looks_like_token(value)
    ]


def _secret_name(name: str) -> bool:
    return any(word in _SECRET_WORDS for word in name.upper().split("_"))


def _field_pattern(fields: Iterable[str]) -> re.Pattern[str]:
    """`field='v'`, `field="v"`, `"field": "v"` and `field: v` for exactly these names."""
    names = "|".join(sorted(map(re.escape, set(fields)), key=len, reverse=True))
    return re.compile(
        rf"""((?<![\w.-])["']?(?:{names})["']?\s*[=:]\s*)"""
        r"""('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|(?!None\b|null\b)[^\s,)'"}]+)"""
    )


class Redactor:
    """Replaces each secret (as written, as Python repr and as JSON escape it) with a marker."""

    def __init__(self, secrets: Iterable[str | None], fields: Iterable[str] = ()):
        forms: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET_LEN:
                continue
            forms |= {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}
        self.forms = sorted(forms, key=len, reverse=True)
        self._exact = re.compile("|".join(map(re.escape, self.forms))) if self.forms else None
        self.fields = (*SECRET_FIELDS, *fields)
        self._named = _field_pattern(self.fields)

    @classmethod
    def for_service(
        cls, api_key: str | None, env: Mapping[str, str], marked: Iterable[str] = ()
    ) -> Redactor:
        names = secret_env_names(env, marked)
        return cls([api_key, *(env[name] for name in names)], fields=names)

    def redact(self, text: str) -> str:
        if self._exact is not None:
            text = self._exact.sub(REDACTED, text)
        if "=" in text or ":" in text:
            text = self._named.sub(lambda m: f"{m.group(1)}{_quoted_like(m.group(2))}", text)
        return text

    def redact_cut(self, text: str) -> str:
        """For a line cut short: also hide a secret's beginning left at the very end."""
        text = self.redact(text)
        for form in self.forms:
            for keep in range(len(form) - 1, MIN_SECRET_LEN - 1, -1):
                if text.endswith(form[:keep]):
                    return text[:-keep] + REDACTED
        return text


def _quoted_like(value: str) -> str:
    quote = value[0] if value[0] in "'\"" else ""
    return f"{quote}{REDACTED}{quote}"
