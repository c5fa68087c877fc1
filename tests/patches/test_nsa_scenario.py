"""lab/gpu/nsa_scenario.py without a GPU: the workload, the log reading, and a whole run.

The whole run uses a stand-in interpreter: `-m sglang.launch_server` becomes a small HTTP
server that dies with the reference deployment's traceback on a shared-prefix request
while the real sglang 0.5.11 file on its site-packages is unpatched; everything else
(`-m glm5svc patch ...`) runs for real, so apply and revert touch the real 0.5.11 file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glm5svc.profiles import load_profile
from lab.gpu import nsa_scenario as nsa
from lab.gpu.common import FIRED_UP, NVLS_OFF
from testkit.engine import free_port

from .conftest import snapshot

CRASH = "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'"

CRASH_LOG = f"""\
[2026-12-01 03:00:00] Load weight end. elapsed=0.20 s, type=GlmMoeDsaForCausalLM
[2026-12-01 03:00:09] {FIRED_UP}
[2026-12-01 03:00:10] Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, \
token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0,
[2026-12-01 03:00:11] Prefill batch, #new-seq: 16, #new-token: 1024, #cached-token: 32768, \
token usage: 0.02, #running-req: 0, #queue-req: 0, #pending-token: 0,
[2026-12-01 03:00:11] Scheduler hit an exception: Traceback (most recent call last):
  File "/site/sglang/srt/managers/scheduler.py", line 3930, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/site/sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py", \
line 470, in _get_mla_kv_buffer_from_fp8_for_nsa
    kv_indices = backend.forward_metadata.page_table_1_flattened
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
{CRASH}

[2026-12-01 03:00:11] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def test_workload_shares_a_page_aligned_prefix_over_the_one_shot_threshold():
    work = nsa.build_workload()
    assert len(work.prime) == nsa.PREFIX_LEN and nsa.PREFIX_LEN % 64 == 0
    assert len(work.waves) == nsa.WAVES
    assert work.requests == 1 + nsa.WAVES * nsa.PER_WAVE
    prompts = [p for wave in work.waves for p in wave]
    assert all(p[: nsa.PREFIX_LEN] == work.prime for p in prompts)
    assert len({tuple(p[nsa.PREFIX_LEN :]) for p in prompts}) == len(prompts)  # unique tails
    assert all(4 <= t < nsa.VOCAB for p in prompts for t in p)
    assert len(work.waves[0]) * nsa.PREFIX_LEN >= nsa.CHUNKED_PREFIX_THRESHOLD
    assert nsa.build_workload(seed=1).prime != work.prime


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [({"prefix_len": 100}, "multiple of 64"), ({"per_wave": 2}, "raise per_wave")],
)
def test_workload_refuses_what_cannot_reach_the_path(kwargs, fix):
    with pytest.raises(ValueError, match=fix):
        nsa.build_workload(**kwargs)


def test_signature_of_the_reference_crash_and_the_batches_before_it():
    assert nsa.find_signature(CRASH_LOG) == CRASH
    batches = nsa.prefill_batches(CRASH_LOG)
    assert batches == {
        "prefill_batches": 2,
        "max_cached_tokens_in_batch": 32768,
        "batches_over_threshold": 1,
    }


def test_signature_of_other_failures_and_of_a_healthy_log():
    healthy = CRASH_LOG.split("[2026-12-01 03:00:11] Scheduler")[0]
    assert nsa.find_signature(healthy) is None
    missing = "Traceback (most recent call last):\nImportError: libfoo: flash_ops.abi3.so\n"
    assert nsa.find_signature(missing).startswith("ImportError: libfoo: flash_ops")
    no_fa3 = "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."
    assert nsa.find_signature(f"x\n{no_fa3}\n") == no_fa3
    other = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad shape\n'
    assert nsa.find_signature(other) == "ValueError: bad shape"
    assert nsa.find_signature("Subprocess scheduler_0 (pid=9) crashed with exit code -9.")


def test_flags_carry_fp8_kv_and_radix_cache_on(tmp_path):
    flags = nsa.server_flags(tmp_path, 31000)
    pairs = dict(zip(flags, [*flags[1:], None], strict=True))
    assert pairs["--kv-cache-dtype"] == "fp8_e4m3"
    assert pairs["--attention-backend"] == "flashinfer"
    assert {pairs["--nsa-prefill-backend"], pairs["--nsa-decode-backend"]} != {"trtllm"}
    assert "--disable-radix-cache" not in flags
    assert "--disable-chunked-prefix-cache" not in flags
    assert pairs["--load-format"] == "dummy" and pairs["--port"] == "31000"


def test_nsa_backends_choose_the_guarded_case(tmp_path, capsys):
    flags = nsa.server_flags(tmp_path, 31000, ("trtllm", "trtllm"))
    assert flags[flags.index("--nsa-prefill-backend") + 1] == "trtllm"
    assert flags[flags.index("--nsa-decode-backend") + 1] == "trtllm"
    argv = ["--site", str(tmp_path), "--model-dir", str(tmp_path), "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        nsa.main([*argv, "--nsa-backends", "trtllm"])
    assert exit_info.value.code == 2
    assert "PREFILL,DECODE" in capsys.readouterr().err


PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(allow_abbrev=False)
ServerArgs.add_cli_args(parser)
print(json.dumps(vars(parser.parse_args(sys.argv[1:])), default=str))
"""


@pytest.mark.slow  # the parser venvs are built once per machine (tests/conftest.py)
def test_flags_are_accepted_by_the_real_0_5_11_parser(sglang_parser_pythons, tmp_path):
    assert load_profile("cu130").sglang_version == "0.5.11"
    flags = nsa.server_flags(tmp_path, 31000)
    proc = subprocess.run(
        [str(sglang_parser_pythons["cu130"]), "-c", PARSE, *flags],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    args = json.loads(proc.stdout.strip().splitlines()[-1])
    assert args["attention_backend"] == "flashinfer"
    assert args["kv_cache_dtype"] == "fp8_e4m3"
    assert (args["nsa_prefill_backend"], args["nsa_decode_backend"]) == nsa.NSA_BACKENDS
    assert args["page_size"] == 64 and args["max_total_tokens"] == 131072
    assert args["disable_radix_cache"] is False
    assert args["disable_chunked_prefix_cache"] is False


def test_run_refuses_an_env_with_nvlink_multicast_on(tmp_path):
    env = {**NVLS_OFF, "NCCL_NVLS_ENABLE": "1"}
    with pytest.raises(ValueError, match="NCCL_NVLS_ENABLE"):
        nsa.run(sys.executable, tmp_path, tmp_path, tmp_path / "out", env, budget_s=5)
    assert not (tmp_path / "out").exists()


FAKE_PYTHON = """\
#!{real}
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
if args[:2] != ["-m", "sglang.launch_server"]:
    os.execv({real!r}, [{real!r}, *args])
port = int(args[args.index("--port") + 1])
site = os.environ["PYTHONPATH"].split(os.pathsep)[0]
source = open(os.path.join(site, {mha!r})).read()
patched = "glm5svc patch nsa-fp8-mha-prefix" in source


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        shared = len(body["input_ids"]) > {prefix}
        print("Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: %d, "
              % ({prefix} if shared else 0), flush=True)
        if shared and not patched:
            print("Scheduler hit an exception: Traceback (most recent call last):", flush=True)
            print({crash!r}, flush=True)
            os._exit(1)
        reply = json.dumps({{"text": "w5 w6", "meta_info": {{}}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.request_queue_size = 64  # a wave connects all at once
server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
print({ready!r}, flush=True)
server.serve_forever()
"""


@pytest.mark.slow  # the real sglang 0.5.11 wheel
def test_whole_run_crashes_unpatched_finishes_patched_and_reverts(make_site, tmp_path, monkeypatch):
    monkeypatch.setattr(nsa, "SETTLE_S", 0.5)
    site = make_site("0.5.11")
    before = snapshot(site)
    fake = tmp_path / "python"
    fake.write_text(
        FAKE_PYTHON.format(
            real=sys.executable,
            mha="sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py",
            prefix=nsa.PREFIX_LEN,
            crash=CRASH,
            ready=FIRED_UP,
        )
    )
    fake.chmod(0o755)
    env = {**os.environ, **NVLS_OFF}
    out = tmp_path / "out"

    result = nsa.run(str(fake), site, tmp_path, out, env, port=free_port(), budget_s=120)

    unpatched, patched = result["unpatched"], result["patched"]
    assert unpatched["started"] and unpatched["crashed"], result["notes"]
    assert unpatched["signature"] == CRASH
    assert unpatched["requests_ok"] == 1  # the priming request; the shared ones died
    assert unpatched["requests_failed"] == nsa.WAVES * nsa.PER_WAVE
    assert unpatched["exit_code"] == 1 and not unpatched["group_killed"]
    assert result["patch_apply"]["verdict"] == "applied"
    assert patched["started"] and not patched["crashed"], result["notes"]
    assert patched["signature"] is None
    assert patched["requests_ok"] == 1 + nsa.WAVES * nsa.PER_WAVE
    assert patched["requests_failed"] == 0
    assert patched["max_cached_tokens_in_batch"] == nsa.PREFIX_LEN
    assert result["patch_status_before"] == "not_applied"
    assert result["patch_after"] == "not_applied"
    assert snapshot(site) == before  # reverted byte for byte, no backup left behind
    assert CRASH in (out / "nsa-unpatched.log").read_text()
    assert FIRED_UP in (out / "nsa-patched.log").read_text()
    port = int(result["flags"][result["flags"].index("--port") + 1])
    assert result["flags"] == nsa.server_flags(tmp_path, port)


RECORDED_NSA = (
    Path(__file__).resolve().parents[1] / "fixtures" / "real_engine" / "sglang-0.5.11-h200-nsa"
)


def test_recorded_h200_runs_read_as_what_happened():
    """sglang 0.5.11 on an H200 (2026-12-01, run 05:43-05:49 UTC): unpatched, the first wave
    sharing the cached prefix crashed the scheduler (one request served, 64 failed); patched,
    the same workload served prefill batches past the one-shot threshold."""
    unpatched = (RECORDED_NSA / "nsa-unpatched.log").read_text()
    patched = (RECORDED_NSA / "nsa-patched.log").read_text()
    assert nsa.find_signature(unpatched) == CRASH
    assert nsa.find_signature(patched) is None
    # The crash struck in the batch after the priming request's, before that batch was logged.
    assert nsa.prefill_batches(unpatched)["batches_over_threshold"] == 0
    before_crash = unpatched.split("Scheduler hit an exception")[0]
    assert FIRED_UP in before_crash and CRASH not in before_crash
    batches = nsa.prefill_batches(patched)
    assert batches["batches_over_threshold"] >= 1
    assert batches["max_cached_tokens_in_batch"] >= nsa.CHUNKED_PREFIX_THRESHOLD
    recorded = json.loads((RECORDED_NSA / "results.json").read_text())["nsa"]["nsa"]
    assert recorded["unpatched"]["crashed"] and recorded["unpatched"]["signature"] == CRASH
    assert not recorded["patched"]["crashed"] and recorded["patched"]["requests_failed"] == 0
    assert recorded["patched"]["batches_over_threshold"] == batches["batches_over_threshold"]
