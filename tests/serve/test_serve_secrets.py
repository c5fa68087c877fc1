"""Secrets stay out of the journal, /status and result files, with the real serve."""

from __future__ import annotations

import stat

KEY = "sk-Very'Secret\\Key-0123"


def test_api_key_and_env_secrets_stay_out_of_the_log_and_status(serve, tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    key_file.chmod(0o600)
    process = serve(
        "load=0.2",
        server={
            "api_key_file": str(key_file),
            "env": {"HF_TOKEN": "hf_abcdefghijklmnop", "NCCL_DEBUG": "INFO"},
        },
    )
    status = process.wait_ready()  # the probes authenticated with the key
    body = process.get("/status")[1]
    process.terminate()
    assert process.wait_exit(15) == 0
    assert "api_key=" in process.output  # sglang's argument dump was relayed, redacted
    for secret in (KEY, repr(KEY)[1:-1], "hf_abcdefghijklmnop"):
        assert secret not in process.output
        assert secret not in body
    env = status["launch_plan"]["env"]
    assert env["HF_TOKEN"] == env["NCCL_DEBUG"] == "<secret>"  # server.env: names only
    results = tmp_path / "results" / "serve-last-run.json"
    assert stat.S_IMODE(results.stat().st_mode) == 0o600
    secrets_file = tmp_path / "run" / "sglang-secrets.yaml"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
