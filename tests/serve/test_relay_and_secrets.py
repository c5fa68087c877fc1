"""The output relay (linear, bounded lines, redacting) and secrets kept out of logs and /status."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from glm5svc.redaction import REDACTED, Redactor, looks_like_token, secret_env_names
from glm5svc.serve.relay import OutputReader

REAL_ENGINE = Path(__file__).parents[1] / "fixtures" / "real_engine"
KEY = "sk-Very'Secret\\Key-0123"


def relay(data: bytes, **kwargs) -> list[str]:
    """Feed `data` through OutputReader over a real pipe; the lines it passes on."""
    read_fd, write_fd = os.pipe()
    lines: list[str] = []
    done = threading.Event()
    reader = OutputReader(read_fd, lines.append, done.set, **kwargs)
    reader.start()
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(data)
    assert done.wait(60)
    os.close(read_fd)
    return lines


def test_sglang_server_args_line_is_redacted_in_every_form():
    redactor = Redactor([KEY])
    line = f"server_args=ServerArgs(model_path='/m', api_key={KEY!r}, admin_api_key=None)"
    out = relay((line + "\n").encode(), redact=redactor.redact)
    assert out == [f"server_args=ServerArgs(model_path='/m', api_key=\"{REDACTED}\", "
                   "admin_api_key=None)"]  # fmt: skip
    # The key is hidden however it is quoted, even when it is not named.
    for text in (KEY, repr(KEY), f'"key": "{KEY}"'.replace("\\", "\\\\"), f"Bearer {KEY}"):
        assert "Secret" not in redactor.redact(text), text


def test_known_secret_fields_are_redacted_even_when_the_value_is_unknown():
    redactor = Redactor([], fields=["HF_TOKEN"])
    assert redactor.redact("HF_TOKEN='abc123', api_key=\"xyz\", admin_api_key='q'") == (
        f"HF_TOKEN='{REDACTED}', api_key=\"{REDACTED}\", admin_api_key='{REDACTED}'"
    )
    assert redactor.redact('{"api_key": "xyz", "ssl_keyfile_password": "p"}') == (
        f'{{"api_key": "{REDACTED}", "ssl_keyfile_password": "{REDACTED}"}}'
    )
    assert redactor.redact("api_key: sk-abc more") == f"api_key: {REDACTED} more"
    assert redactor.redact("api_key=None, admin_api_key=None") == "api_key=None, admin_api_key=None"


def test_a_word_inside_a_field_name_is_not_a_secret():
    redactor = Redactor([])
    text = (
        "tokenizer_path='/m/tok', tokenizer_mode='auto', hf_token_path='/x', "
        "max_total_tokens=None, my_api_key_file='/etc/k', secret_sauce='kept'"
    )
    assert redactor.redact(text) == text


def test_the_recorded_h200_server_args_line_keeps_everything_but_the_secrets():
    """sglang 0.5.11's own server_args line (bare, unredacted, on the H200) with a key set."""
    log = REAL_ENGINE / "sglang-0.5.11-h200-service" / "bare.log"
    line = next(x for x in log.read_text().splitlines() if "server_args=ServerArgs(" in x)
    assert "api_key=None" in line and "admin_api_key=None" in line
    with_key = line.replace(" api_key=None", f" api_key={KEY!r}", 1).replace(
        "admin_api_key=None", "admin_api_key='adm1n-s3cret'", 1
    )
    redactor = Redactor.for_service(KEY, {"TOKENIZERS_PARALLELISM": "false"})
    out = relay((with_key + "\n").encode(), redact=redactor.redact)[0]
    assert "Secret" not in out and "adm1n" not in out
    # repr() quotes this key with ", the admin key with '.
    assert f' api_key="{REDACTED}"' in out and f"admin_api_key='{REDACTED}'" in out
    # Everything else is as sglang printed it: the line less its two secrets.
    assert out.replace(f'"{REDACTED}"', "None").replace(f"'{REDACTED}'", "None") == line
    for kept in ("tokenizer_path='/", "tokenizer_mode='auto'", "tokenizer_backend='huggingface'",
                 "max_total_tokens=", "skip_tokenizer_init=False"):  # fmt: skip
        assert kept in out, kept


def test_server_env_secrets_marked_named_or_token_looking():
    env = {
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "short",
        "MY_VAR": "abcdefgh12345678ijkl",
        "MARKED": "plain",
        "CUDA_HOME": "/usr/local/cuda-12.8",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert secret_env_names(env, ["MARKED"]) == ["HF_TOKEN", "MY_VAR", "MARKED"]
    assert looks_like_token("hf_abc")
    assert not looks_like_token("/usr/local/cuda-12.8/lib64")
    redactor = Redactor.for_service(None, env, ["MARKED"])
    assert redactor.redact("token short, plain and abcdefgh12345678ijkl; INFO false") == (
        f"token {REDACTED}, {REDACTED} and {REDACTED}; INFO false"
    )


def test_a_16_mb_line_is_cut_once_and_the_next_line_survives():
    big = b"x" * (16 * 1024 * 1024)
    out = relay(big + b"\nafter\n", max_line_bytes=32 * 1024)
    assert len(out) == 2
    assert out[0].startswith("x" * 1000)
    assert out[0].endswith(f"[... {len(big) - 32 * 1024} more bytes cut by glm5svc]")
    assert out[1] == "after"


def test_a_secret_cut_at_the_line_limit_is_not_half_shown():
    redactor = Redactor([KEY])
    line = b"y" * 90 + KEY.encode() + b"z" * 100
    out = relay(line + b"\n", max_line_bytes=100, redact=redactor.redact,
                redact_cut=redactor.redact_cut)  # fmt: skip
    assert KEY[:4] not in out[0] and out[0].startswith("y" * 90 + REDACTED)


def test_carriage_returns_and_split_line_ends_still_make_lines():
    out = relay(b"bar 10%\rbar 20%\r\nnext\nlast-without-newline")
    assert out == ["bar 10%", "bar 20%", "next", "last-without-newline"]
