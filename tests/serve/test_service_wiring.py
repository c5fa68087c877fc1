"""The service as `glm5svc serve` builds it (glm5svc.serve.service.build_service), in this
process: each host fact is read once for preflight, the plan and the supervisor."""

from __future__ import annotations

import io
import sys
from collections import Counter
from dataclasses import replace

import pytest

import glm5svc
from glm5svc import config as config_module
from glm5svc import gpus as gpus_module
from glm5svc import model_info
from glm5svc.config import load_config
from glm5svc.patches import install as install_module
from glm5svc.patches import report as report_module
from glm5svc.preflight import run as preflight_run
from glm5svc.preflight.rows import FAIL, WARN
from glm5svc.serve import supervisor as supervisor_module
from glm5svc.serve.relay import StderrSink
from glm5svc.serve.service import build_service
from testkit import fake_pynvml
from tests.serve.conftest import run_in_process, write_config

# Each fact's reader, where it is defined: NVML's GPU facts, the sglang install (one
# subprocess), every patch's verdict, config.json, the API key.
READERS = [
    (gpus_module, "read_nvml_facts"),
    (install_module, "locate_sglang"),
    (report_module, "patch_report"),
    (model_info, "read_model_facts"),
    (config_module, "read_api_key"),
]


def count_calls(monkeypatch, readers) -> Counter:
    """Replace every binding of each reader in every glm5svc module (`from x import f` too)
    with a counting wrapper."""
    calls: Counter = Counter()
    for module, name in readers:
        original = getattr(module, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        for loaded in list(sys.modules.values()):
            if getattr(loaded, "__name__", "").startswith(glm5svc.__name__ + "."):
                for attribute, value in list(vars(loaded).items()):
                    if value is original:
                        monkeypatch.setattr(loaded, attribute, counted)
    return calls


def site_with_sglang(tmp_path, version: str):
    """A site-packages directory with an sglang of `version` (metadata and an empty package)."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


@pytest.mark.timeout(120)
def test_each_host_fact_is_read_once_per_serve(tmp_path, monkeypatch):
    """Preflight (every default check), the plan, the secret file, the supervisor's probes
    and its redactor all use the facts read once."""
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-once\n")
    key_file.chmod(0o600)
    site = site_with_sglang(tmp_path, "0.5.11")
    server = {
        "api_key_file": str(key_file),
        "python": sys.executable,
        "env": {"PYTHONPATH": str(site)},
    }
    config = load_config(write_config(tmp_path, "load=0.2", server, run_preflight=True))
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "run"))
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make_module(8))
    monkeypatch.setattr(supervisor_module, "become_subreaper", lambda: False)
    # Every default check runs; what fails on this GPU-less machine only warns here.
    checks = preflight_run.default_checks()
    monkeypatch.setattr(preflight_run, "default_checks", lambda: [warn_only(c) for c in checks])
    calls = count_calls(monkeypatch, READERS)
    out = io.StringIO()

    service = build_service(config, sink=StderrSink(out))
    assert run_in_process(service, lambda state: state.ready) == 0, out.getvalue()[-3000:]

    assert "preflight passed" in out.getvalue()
    assert "ready after" in out.getvalue()  # the probes sent the key the facts read
    assert service.plan.sglang.label == "0.5.11"
    assert calls == {name: 1 for _, name in READERS}, calls


def warn_only(check):
    def check_warning_only(ctx):
        return [replace(r, status=WARN) if r.status == FAIL else r for r in check(ctx)]

    check_warning_only.__name__ = check.__name__
    return check_warning_only
