"""The patch flashinfer-autotune-cache, run: sglang's own `_flashinfer_autotune`, patched in
the real 0.5.9-0.5.11 wheels, executed against stand-ins for torch and FlashInfer. It names
the cache file by GPU, FlashInfer version, MoE backend, start cap and rank, under the folder
the launch plan gives, and leaves autotune as it was without that folder or `cache=`. From
0.5.12.post1 sglang keeps its own file under SGLANG_CACHE_DIR, which the plan shares."""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import logging
import os
import sys
import types
import zipfile
from types import SimpleNamespace

import pytest

from glm5svc.config import config_from_mapping
from glm5svc.gpus import GpuFacts
from glm5svc.launch_plan import AUTOTUNE_DIR_ENV, build_launch_plan
from glm5svc.patches import Verdict, patch_report
from glm5svc.patches.engine import apply_patch
from glm5svc.profiles import SglangVersion, load_profile
from glm5svc.tune.render import trial_mapping
from glm5svc.tune.space import apply_candidate

from .conftest import sglang_wheel

pytestmark = pytest.mark.slow
CACHE = "flashinfer-autotune-cache"


def patched_method(site):
    report = patch_report(site, [CACHE])
    (result,) = report.results
    assert result.verdict is Verdict.NOT_APPLIED
    assert apply_patch(result, report.install).action == "applied"
    tree = ast.parse(result.path.read_text())
    method = next(n for n in ast.walk(tree) if getattr(n, "name", "") == "_flashinfer_autotune")
    return ast.unparse(method)


def run_method(source: str, autotune, monkeypatch) -> list:
    calls: list = []
    flashinfer = types.ModuleType("flashinfer")
    flashinfer.__version__ = "0.6.8.post1"
    autotuner = types.ModuleType("flashinfer.autotuner")
    autotuner.autotune = autotune
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", autotuner)
    stream = SimpleNamespace(wait_stream=lambda other: None)
    torch = SimpleNamespace(
        cuda=SimpleNamespace(get_device_name=lambda gpu: "NVIDIA RTX PRO 6000 Blackwell",
                             current_stream=lambda: stream),
        get_device_module=lambda device: SimpleNamespace(stream=lambda s: contextlib.nullcontext()),
        inference_mode=contextlib.nullcontext,
    )  # fmt: skip
    namespace = {"torch": torch, "os": os, "inspect": inspect, "logger": logging.getLogger("t")}
    exec(source, namespace)  # noqa: S102 - sglang's own method, patched, on stand-ins
    runner = SimpleNamespace(
        gpu_id=0, tp_rank=3, device="cuda", forward_stream=stream,
        server_args=SimpleNamespace(moe_runner_backend="flashinfer_cutlass"),
        req_to_token_pool=SimpleNamespace(size=1024),
        _dummy_run=dummy_run(calls),
    )  # fmt: skip
    namespace["_flashinfer_autotune"](runner)
    return calls


def dummy_run(calls: list):
    def run(batch_size, run_ctx=None):
        with run_ctx or contextlib.nullcontext():  # sglang enters it around the forward
            calls.append(("dummy", batch_size))

    return run


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.11"])
def test_the_cache_file_is_keyed_and_used(make_site, tmp_path, monkeypatch, version):
    source = patched_method(make_site(version))
    entered: list = []

    @contextlib.contextmanager
    def autotune(tune_mode=True, cache=None):
        entered.append(cache)
        yield

    monkeypatch.setenv(AUTOTUNE_DIR_ENV, str(tmp_path / "tuned"))
    assert run_method(source, autotune, monkeypatch) == [("dummy", 1024)]
    name = "NVIDIA_RTX_PRO_6000_Blackwell-0.6.8.post1-flashinfer_cutlass-cap1024-tp3.json"
    assert entered == [str(tmp_path / "tuned" / name)] * 2  # the outer context and run_ctx
    assert (tmp_path / "tuned").is_dir()

    entered.clear()
    monkeypatch.delenv(AUTOTUNE_DIR_ENV)
    run_method(source, autotune, monkeypatch)
    assert entered == [None, None]  # no folder named: sglang's own call

    @contextlib.contextmanager
    def old_autotune(tune_mode=True):  # a FlashInfer without cache=
        entered.append("old")
        yield

    entered.clear()
    monkeypatch.setenv(AUTOTUNE_DIR_ENV, str(tmp_path / "tuned"))
    run_method(source, old_autotune, monkeypatch)
    assert entered == ["old", "old"]


def test_the_current_profile_keeps_sglangs_own_cache_under_server_cache_dir(tmp_path):
    """sglang 0.5.23 (profile cu130-0.5.23) writes its FlashInfer autotune results under
    SGLANG_CACHE_DIR and reads them back by default; the plan puts SGLANG_CACHE_DIR under
    server.cache_dir, the same folder for glm5.service and for every tune trial."""
    version = load_profile("cu130-0.5.23").sglang_version
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        runner = wheel.read("sglang/srt/model_executor/runner/flashinfer_autotune.py").decode()
        environ = wheel.read("sglang/srt/environ.py").decode()
    path_fn = ast.unparse(
        next(
            n
            for n in ast.walk(ast.parse(runner))
            if getattr(n, "name", "") == "flashinfer_autotune_cache_path"
        )
    )
    assert "envs.SGLANG_CACHE_DIR.get()" in path_fn and "'autotune'" in path_fn
    assert "SGLANG_FLASHINFER_AUTOTUNE_CACHE = EnvBool(True)" in environ

    model = tmp_path / "glm5"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["GlmMoeDsaForCausalLM"], "index_topk": 64})
    )
    mapping = {
        "model": {"path": str(model)},
        "server": {"profile": "cu130-0.5.23", "cache_dir": str(tmp_path / "cache")},
    }
    gpus = GpuFacts(8, (12, 0), "590", ["NVIDIA RTX PRO 6000"] * 8, "nvml", memory_mib=97887)

    def sglang_cache(data):
        config = config_from_mapping(data)
        plan = build_launch_plan(config, gpus=gpus, sglang=SglangVersion(version, True, "t"))
        return plan.env["SGLANG_CACHE_DIR"]

    service = sglang_cache(mapping)
    assert service == str(tmp_path / "cache" / "sglang")
    for candidate in ({"tuning.cuda_graph": True}, {"tuning.mem_fraction_static": 0.88}):
        trial = trial_mapping(apply_candidate(mapping, candidate), tmp_path / "trial")
        assert sglang_cache(trial) == service
