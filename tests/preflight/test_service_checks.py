"""Preflight rows for the engine and listener ports, an engine open without a key, and the
KV pool the last run recorded."""

from __future__ import annotations

import json
import os
import socket

import pytest

from glm5svc.config import config_from_mapping, read_api_key
from glm5svc.errors import ConfigError
from glm5svc.facts import HostFacts
from glm5svc.preflight.rows import FAIL, OK, WARN, PreflightContext
from glm5svc.preflight.run import default_checks
from glm5svc.preflight.service import LAST_RUN_FILE, check_exposure, check_last_run, check_ports
from testkit.engine import free_port


def context(mapping):
    config = config_from_mapping(mapping)
    return PreflightContext(config, HostFacts.given(config, nvml_error="no NVML here"))


def ports(engine: int, listener: int) -> dict:
    return {"server": {"port": engine}, "service": {"listen_port": listener}}


def test_a_taken_engine_port_fails_naming_who_holds_it_and_the_fix():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rows = check_ports(
            context({"server": {"port": port}, "service": {"listen_port": free_port()}})
        )
    engine, listener = rows
    assert engine.status == FAIL
    assert f"port {port} is already in use by pid {os.getpid()}" in engine.detail
    assert "server.port" in engine.fix and "systemctl stop glm5" in engine.fix
    assert listener.status == OK


def test_free_ports_pass():
    rows = check_ports(
        context({"server": {"port": free_port()}, "service": {"listen_port": free_port()}})
    )
    assert [row.status for row in rows] == [OK, OK]


def test_an_engine_open_beyond_loopback_without_a_key_fails_unless_meant(tmp_path):
    open_engine = check_exposure(context({"server": {"host": "0.0.0.0"}}))[0]
    assert open_engine.status == FAIL and "with no API key" in open_engine.detail
    meant = {"server": {"host": "0.0.0.0", "allow_unauthenticated": True}}
    open_engine = check_exposure(context(meant))[0]
    assert open_engine.status == WARN and "with no API key" in open_engine.detail
    assert check_exposure(context({"server": {"host": "127.0.0.1"}}))[0].status == OK
    key = tmp_path / "key"
    key.write_text("k3y-for-tests")
    key.chmod(0o600)
    keyed = check_exposure(context({"server": {"host": "0.0.0.0", "api_key_file": str(key)}}))
    assert keyed[0].status == OK
    key.chmod(0o604)
    config = config_from_mapping({"server": {"host": "0.0.0.0", "api_key_file": str(key)}})
    with pytest.raises(ConfigError) as unusable:
        read_api_key(config.server.api_key_file)
    facts = HostFacts.given(config, nvml_error="no NVML here", key_error=str(unusable.value))
    keyed = check_exposure(PreflightContext(config, facts))
    assert keyed[0].status == FAIL and "mode 0604" in keyed[0].detail


def test_preflight_runs_them():
    assert {check_ports, check_exposure, check_last_run} <= set(default_checks())


def test_the_last_runs_kv_pool_is_one_info_row_when_recorded(tmp_path):
    ctx = context({"service": {"results_dir": str(tmp_path)}})
    assert check_last_run(ctx) == []  # no last run
    record = {"ended_at": 1_796_000_000, "exit_status": 0, "message": "stopped by SIGTERM"}
    (tmp_path / LAST_RUN_FILE).write_text(json.dumps(record))
    assert check_last_run(ctx) == []  # a run that ended before its KV pool was allocated
    (tmp_path / LAST_RUN_FILE).write_text(json.dumps({**record, "kv_pool_tokens": 12565164}))
    [row] = check_last_run(ctx)
    assert row.status == OK and row.name == "last run's KV pool"
    assert row.detail.startswith("12565164 tokens (exit status 0 ended 2026-")
    (tmp_path / LAST_RUN_FILE).write_text("{not json")
    [row] = check_last_run(ctx)
    assert row.status == WARN and str(tmp_path / LAST_RUN_FILE) in row.detail
    assert "remove it" in row.detail
