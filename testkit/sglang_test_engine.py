"""A stand-in for `python -m sglang.launch_server`, for tests only (never installed as the engine).

Longer than 400 lines: one self-contained file, because the lab and Molecule copy it
into containers as a single script.

Speaks the part of SGLang's HTTP surface that glm5svc and `sglang.bench_serving
--backend sglang` use, answering as sglang 0.5.11 does (entrypoints/http_server.py):
  /health, /health_generate  one single-token generation (not counted in the request metrics)
  /generate          `text` or `input_ids`; streaming `data: {...}\\n\\n` chunks with
                     cumulative text and meta_info (cached_tokens: the prefix-cache hit),
                     then `data: [DONE]`; served from the moment the port opens
  /server_info, /get_server_info  the server args, max_total_num_tokens, and
                     internal_states: [one dict per DP rank] with the scheduler's live args
                     (pp_max_micro_batch_size), last_gen_throughput, memory_usage,
                     effective_max_running_requests_per_dp
  /set_internal_state  POST/PUT {"server_args": {"pp_max_micro_batch_size": N}}: the running
                     limit becomes N when 1 <= N <= --max-running-requests; the answer is
                     [true] either way (sglang's `updated` per DP rank), the refusal is logged
                     ("Updating pp_max_micro_batch_size to N is rejected because it is out of
                     the valid range [1, MAX].") and the value kept
  /flush_cache       GET/POST [?timeout=S]: empties the prefix cache when nothing runs or
                     waits ("Cache flushed.\\nPlease check backend logs ..."), else 400
                     "Flush cache failed.\\n" (with a timeout: waits that long for idle)
  /get_model_info, /model_info, /v1/models
  /metrics           sglang: families with sglang 0.5.11's HELP text and labels (METRICS):
                     gauges num_running_reqs, num_queue_reqs, gen_throughput, cache_hit_rate,
                     token_usage, realtime_tokens_total{mode=prefill_compute|
                     prefill_cache|decode} and cuda_graph_passes_total{mode=prefill_|decode_
                     cuda_graph|none} (scheduler labels engine_type, model_name,
                     moe_ep_rank, pp_rank, tp_rank), advancing with every step; the
                     tokenizer's prompt_tokens_total, generation_tokens_total,
                     num_requests_total and cached_tokens_total{cache_source="device"}
                     (labels engine_type, model_name), counted when a request finishes; a
                     family appears once it has a sample, as in prometheus multiprocess mode
Accepts launch_server-style arguments (--host, --port, --model-path, ...; the rest is
ignored) and prints SGLang-like log lines for each start-up phase, the warm-up generation
(8 tokens of "The capital city of France is"; none with --skip-server-warmup) before "The
server is fired up and ready to roll!", sglang's "Prefill batch, #new-seq: ..., #new-token:
..., #cached-token: ..., token usage: ..., #running-req: ..., #queue-req: ..." line for every
step that admits requests and "Decode batch, ..." every --decode-log-interval (40) steps.
Prefix cache (sglang's radix cache, off with --disable-radix-cache): prompts are stored
after prefill in --page-size pages keyed by a hash chain; a later prompt's shared prefix
(whole pages, short of its last token) counts as cached (#cached-token, prefill_cache,
cached_tokens_total) and costs no prefill time; least recently used pages go when the cache
outgrows the KV pool. Text prompts are cut into 4-character tokens.

Behaviour is chosen with --test-mode or $TEST_ENGINE_MODE: comma-separated items,
`key=value` or `key:value`:
  load=SECONDS          weight loading time (progress bar in 10 steps; default 0.5)
  stall-at=PERCENT      stop loading at this percentage and print nothing more
  crash=SIGNATURE       crash with a known failure (see CRASHES) at its real phase
  hang                  once serving, answer nothing and make no progress
  wedge-after=SECONDS   like hang, starting that long after serving began
  ignore-sigterm        the engine and its rank process ignore SIGTERM
  empty-text            non-streaming /generate answers with empty text
  ranks=N               rank log prefixes TP0..TP(N-1) (default 2)
  linger-output=SECONDS a helper process in the group keeps the output pipe open this long
                        after the launcher dies (as children tearing down CUDA do)
  drain-check=SECONDS   how often a draining launcher counts what is left (default 0.5;
                        sglang 0.5.11 checks every 5 s)
  health-wait=SECONDS   how long /health and /health_generate wait after their one-token
                        generation (default 0; sglang 0.5.11 waits 1 s)
Stopping, as sglang 0.5.11 does: SIGTERM to the launcher alone drains (health answers
503, requests in flight finish, then it ends its scheduler child and exits 0); a SIGTERM
that also reaches the scheduler child (a group-wide signal) kills it, and the launcher's
subprocess watchdog then cuts every request ("crashed with exit code -15. Triggering
SIGQUIT"). The scheduler child dies with the launcher (PR_SET_PDEATHSIG, as sglang's
`kill_itself_when_parent_died`).
Throughput model (a real engine's knee): each decode step takes
  step_base_ms + step_per_req_ms * running requests, and gives every running request
one token; at most pp_max_micro_batch_size run (--pp-max-micro-batch-size, else
--max-running-requests; /set_internal_state moves it), the rest queue. Prefill adds
prefill_us_per_token * new (uncached) input tokens to the step. Flags: --step-base-ms (8),
--step-per-req-ms (0.25), --prefill-us-per-token (2), --stream-interval (1).
The settings a tuner searches answer as sglang's would (`predicted_step_ms`, which the
engine loop itself uses, and `kv_pool_tokens`; the factors are `STEP_FACTORS`):
  --mem-fraction-static F (0.9)  the KV pool: int(KV_TOKENS_AT_FULL * F) tokens, capped by
      --max-total-tokens N and rounded down to whole pages (--page-size N, 1); printed on
      "KV Cache is allocated. #tokens: N" and as max_total_num_tokens=N. A request is
      admitted only while the running requests' prompt + max_new tokens (in whole pages)
      fit in the pool, besides --max-running-requests; sglang:token_usage is used/pool.
  --attention-backend NAME, --moe-runner-backend NAME  multiply the whole step by their
      factor (a name not in the table, or no flag: 1.0).
  CUDA graphs (on unless --disable-cuda-graph)  step_base_ms costs 0.6x while at most 64
      requests run, step_per_req_ms 1.05x above that: graphs win at low concurrency and
      lose at high, as the reference deployment saw. A step counts one forward pass in
      sglang:cuda_graph_passes_total as sglang 0.5.11 labels them: a step that admits
      requests a prefill pass too (`prefill_cuda_graph`, the piecewise graph, unless
      --disable-piecewise-cuda-graph: `prefill_none`), every step a decode pass
      (`decode_cuda_graph` while graphs are on and at most --cuda-graph-max-bs (256)
      requests run, else `decode_none`).
  --chunked-prefill-size N  at most N new prompt tokens are admitted per step (at least
      one request; absent or <= 0: no limit).
and --test-mode items:
  noise=FRACTION        each step time times a lognormal factor of that sigma, drawn from
                        random.Random(seed)
  seed=N                the noise's seed (default 0)
  oom-above=F           crash as crash=oom does (at "kv") when --mem-fraction-static > F
  cold=SECONDS          steps take 1.3x for the first SECONDS of serving (kernels compiling
                        for each new shape: a real server's first benchmark is slow)
  kv-at-full=TOKENS     KV_TOKENS_AT_FULL for this engine (a pool small enough to bind in
                        a short CPU benchmark)
Noise across runs and starts, for testing measurement methods (all multiply the step):
  start-effect=SIGMA    one lognormal factor per engine start, drawn from seed= and the
                        start's index in the cache folder (the count in its
                        test-engine-starts file), or from the process id without seed=
  run-noise=SIGMA       a new lognormal factor every run-noise-s seconds of serving (the
  run-noise-s=SECONDS   difference from one run to the next; default 10), same seeding
  drift=FRACTION        the step grows by FRACTION per minute of serving, linearly
  slow=FACTOR           every step takes FACTOR times as long (a setting that serves worse
                        than it measured: the night's rollback tests)
  mode-file=PATH        more items, read from PATH at start (absent: none); what a test's
                        service manager changes between two starts of the same command
Caches that make a second start faster, in the cache folder ($SGLANG_CACHE_DIR, else
$XDG_CACHE_HOME/sglang, else ~/.cache/sglang):
  jit=SECONDS           a start with no marker for its kernel flags (attention and MoE
                        runner backends, CUDA graphs on or off, --max-running-requests,
                        --chunked-prefill-size: `kernel_key`) spends SECONDS compiling inside
                        "Capture piecewise CUDA graph begin/end" (sglang's "Capture cuda graph
                        num tokens [...]", "Compiling num tokens (num_tokens=N): ..." bar,
                        "Compiling a graph for dynamic shape takes X s"; the end line's "Time
                        elapsed" includes it), then writes the marker under test-engine-jit/;
                        a start that finds it compiles nothing
  --skip-server-warmup  no warm-up generation; the ready line is printed all the same
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import uuid
import zlib
from collections import OrderedDict
from pathlib import Path

import yaml
from aiohttp import web

MODEL_CLASS = "GlmMoeDsaForCausalLM"
WARMUP_PROMPT = "The capital city of France is"  # sglang 0.5.11's warm-up text
WORDS = ("Paris", " is", " the", " capital", " of", " France", ".", " It", " has", " a")

SITE = "/opt/glm5/venv/lib/python3.11/site-packages/"
MHA = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py"
TRACEBACK = "Traceback (most recent call last):"
# sglang 0.5.11: the scheduler logs its exception with this header (run_scheduler_process),
# then signals the launcher, whose SIGQUIT handler logs the last line and ends the tree.
SCHEDULER_EXCEPTION = f"Scheduler hit an exception: {TRACEBACK}"
SIGQUIT_LINE = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."

# Crash signatures: phase where they strike, and the log excerpt (as real servers print it).
CRASHES = {
    "cuda-init": (
        "start",
        [
            "Traceback (most recent call last):",
            '  File "/opt/glm5/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", '
            "line 372, in _lazy_init",
            "    torch._C._cuda_init()",
            "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
            "[kernel] nvidia-uvm: uvm_pmm_gpu.c:3176 devmem_alloc_pagemap[pid:92821] "
            "request_free_mem_region() err -34",
        ],
    ),
    "nvml-mismatch": (
        "start",
        [
            "Traceback (most recent call last):",
            "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
            "RuntimeError: Failed to initialize NVML: Driver/library version mismatch",
        ],
    ),
    "shared-experts": (
        "load",
        [
            "Traceback (most recent call last):",
            '  File "/opt/glm5/venv/lib/python3.11/site-packages/sglang/srt/models/'
            'deepseek_v2.py", line 3110, in load_weights',
            "    weight_loader(param, loaded_weight, shard_id)",
            "RuntimeError: The size of tensor a (3072) must match the size of tensor b (6144) "
            "at non-singleton dimension 1",
        ],
    ),
    "oom": (
        "kv",
        [
            "Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has "
            "a total capacity of 94.97 GiB of which 1.12 GiB is free. Including non-PyTorch "
            "memory, this process has 93.84 GiB memory in use.",
        ],
    ),
    "allreduce-fusion": (
        "graph",
        [
            "Traceback (most recent call last):",
            '  File "/opt/glm5/venv/lib/python3.11/site-packages/sglang/srt/model_executor/'
            'cuda_graph_runner.py", line 402, in __init__',
            "Exception: Capture cuda graph failed: No supported CUDA architectures found for "
            "major versions [9, 10].",
        ],
    ),
    "nccl-timeout": (
        "graph",
        [
            "[rank3]:[E1129 21:40:02.123456 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=7168, "
            "NumelOut=7168, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.",
        ],
    ),
    "nccl-error": (
        "graph",
        [
            "Traceback (most recent call last):",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.27.3",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
        ],
    ),
    # sglang 0.5.11's own frames (recorded on an H200: tests/fixtures/real_engine/
    # sglang-0.5.11-h200-nsa/nsa-unpatched.log), the torch wrapper frames left out.
    "prefill-metadata": (
        "generate",
        [
            "Traceback (most recent call last):",
            f'  File "{SITE}sglang/srt/managers/scheduler.py", line 3934, in run_scheduler_process',
            "    scheduler.run_event_loop()",
            f'  File "{SITE}sglang/srt/managers/scheduler.py", line 1565, in event_loop_overlap',
            "    batch_result = self.run_batch(batch)",
            "                   ^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}sglang/srt/managers/scheduler.py", line 2947, in run_batch',
            "    batch_result = self.model_worker.forward_batch_generation(",
            "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}sglang/srt/model_executor/model_runner.py", line 3063, in '
            "forward_extend",
            "    ret = self.model.forward(",
            "          ^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}sglang/srt/models/deepseek_v2.py", line 1486, in forward_prepare',
            "    inner_state = self.forward_normal_one_shot_prepare(",
            "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}{MHA}", line 342, in forward_normal_one_shot_prepare',
            "    return self.forward_normal_prepare(",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}{MHA}", line 233, in forward_normal_prepare',
            "    kv_a, k_pe = self._get_mla_kv_buffer_from_fp8_for_nsa(forward_batch)",
            "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{SITE}{MHA}", line 470, in _get_mla_kv_buffer_from_fp8_for_nsa',
            "    kv_indices = backend.forward_metadata.page_table_1_flattened",
            "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'",
        ],
    ),
    "nan": (
        "generate",
        [
            "Detected errors during sampling! NaN in the logits.",
            "Traceback (most recent call last):",
            "ValueError: Detected errors during sampling! NaN in the logits.",
        ],
    ),
}


# The KV pool --mem-fraction-static 1.0 would give (sglang's default 0.9: 1,080,000).
KV_TOKENS_AT_FULL = 1_200_000
DEFAULT_MEM_FRACTION_STATIC = 0.9
# Multipliers of the step time; names not listed (and absent flags) count 1.0.
STEP_FACTORS = {
    "attention_backend": {"triton": 1.0, "flashinfer": 0.85, "fa3": 0.8},
    "moe_runner_backend": {"auto": 1.0, "triton": 1.1, "flashinfer_cutlass": 0.9, "cutlass": 0.95},
    # CUDA graphs on: step_base_ms times "base" while at most "small_batch" requests run,
    # step_per_req_ms times "per_req" above that.
    "cuda_graph": {"small_batch": 64, "base": 0.6, "per_req": 1.05},
}
COLD_FACTOR = 1.3
DEFAULT_RUN_NOISE_S = 10.0
# The token counts sglang 0.5.11 compiled piecewise CUDA graphs for (chunked prefill 8192).
PIECEWISE_TOKENS = (
    4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240,
    256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280,
    1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096, 4608, 5120, 5632, 6144,
    6656, 7168, 7680, 8192,
)  # fmt: skip
# Under the cache folder: the start counter (start-effect=, run-noise=) and the JIT markers.
START_COUNTER = "test-engine-starts"
JIT_FOLDER = "test-engine-jit"
DEFAULT_CHUNKED_PREFILL_SIZE = 8192  # what the log line shows when the flag is absent
KV_GB_PER_TOKEN = 28.40 / 1043968  # the size this engine printed for its old fixed pool


def kv_pool_tokens(args) -> int:
    """The KV pool in tokens, as the engine sizes it from its flags (and kv-at-full=)."""
    at_full = int(args.mode.get("kv-at-full", KV_TOKENS_AT_FULL))
    tokens = int(at_full * args.mem_fraction_static)
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    page = max(1, args.page_size)
    return tokens // page * page


def request_kv_tokens(args, prompt_tokens: int, max_new: int) -> int:
    """What one request holds in the pool: prompt + max_new, in whole pages."""
    page = max(1, args.page_size)
    return math.ceil((prompt_tokens + max_new) / page) * page


def predicted_step_ms(args, running: int, prefill_tokens: int) -> float:
    """One step with `running` requests decoding and `prefill_tokens` new prompt tokens,
    before noise= and cold=."""
    base, per_req = args.step_base_ms, args.step_per_req_ms
    if not args.disable_cuda_graph:
        graphs = STEP_FACTORS["cuda_graph"]
        if running <= graphs["small_batch"]:
            base *= graphs["base"]
        else:
            per_req *= graphs["per_req"]
    factor = STEP_FACTORS["attention_backend"].get(args.attention_backend, 1.0)
    factor *= STEP_FACTORS["moe_runner_backend"].get(args.moe_runner_backend, 1.0)
    step_ms = base + per_req * running + prefill_tokens * args.prefill_us_per_token / 1e3
    return step_ms * factor


# What sglang 0.5.11's /set_internal_state may change (Scheduler.set_internal_state).
UPDATABLE_SERVER_ARGS = (
    "pp_max_micro_batch_size",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
)
# sglang 0.5.11 http_server.flush_cache's answer when the scheduler flushed.
FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
# The sglang: families served, with their type and help text as sglang 0.5.11 has them
# (observability/metrics_collector.py), and whose labels they carry: the scheduler's
# (per rank) or the tokenizer's.
METRICS = {
    "num_running_reqs": ("gauge", "The number of running requests.", "scheduler"),
    "num_queue_reqs": ("gauge", "The number of requests in the waiting queue.", "scheduler"),
    "gen_throughput": ("gauge", "The generation throughput (token/s).", "scheduler"),
    "cache_hit_rate": ("gauge", "The prefix cache hit rate.", "scheduler"),
    "token_usage": ("gauge", "The token usage.", "scheduler"),
    "prompt_tokens_total": ("counter", "Number of prefill tokens processed.", "tokenizer"),
    "generation_tokens_total": (
        "counter", "Number of generation tokens processed.", "tokenizer",
    ),
    "num_requests_total": ("counter", "Number of requests processed.", "tokenizer"),
    "cached_tokens_total": (
        "counter",
        "Number of cached prompt tokens by source (device/host/storage).",
        "tokenizer",
    ),
    "http_requests_total": (
        "counter", "Total number of HTTP requests by endpoint and method", "http",
    ),
    "http_responses_total": (
        "counter", "Total number of HTTP responses by endpoint and status code", "http",
    ),
    "realtime_tokens_total": (
        "counter",
        "Total number of tokens processed (updated on each log interval). "
        "mode: prefill_compute, prefill_cache, decode.",
        "scheduler",
    ),
    "cuda_graph_passes_total": (
        "counter", "Total number of forward passes categorized by CUDA graph.", "scheduler",
    ),
}  # fmt: skip


def server_args_dict(args) -> dict:
    """The server args this engine takes, under sglang's names."""
    return {
        "model_path": args.model_path,
        "served_model_name": args.served_model_name or args.model_path,
        "tp_size": args.tp_size or 1,
        "max_running_requests": args.max_running_requests,
        "context_length": args.context_length,
        "mem_fraction_static": args.mem_fraction_static,
        "max_total_tokens": args.max_total_tokens,
        "attention_backend": args.attention_backend,
        "moe_runner_backend": args.moe_runner_backend,
        "disable_cuda_graph": args.disable_cuda_graph,
        "disable_radix_cache": args.disable_radix_cache,
        "chunked_prefill_size": args.chunked_prefill_size,
        "page_size": args.page_size,
        "skip_server_warmup": args.skip_server_warmup,
        "decode_log_interval": args.decode_log_interval,
        "pp_max_micro_batch_size": args.pp_max_micro_batch_size,
    }


def render_metrics(engine: Engine, model_name: str) -> str:
    """/metrics as sglang 0.5.11 serves it (prometheus multiprocess: labels in name order,
    a family with no sample yet left out)."""
    tokenizer = {"engine_type": "unified", "model_name": model_name}
    scheduler = {**tokenizer, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    usage = engine.kv_used / engine.kv_tokens if engine.kv_tokens else 0.0
    samples = {
        "num_running_reqs": [({}, len(engine.running))],
        "num_queue_reqs": [({}, len(engine.waiting))],
        "gen_throughput": [({}, engine.last_gen_throughput)],
        "cache_hit_rate": [({}, engine.last_cache_hit_rate)],
        "token_usage": [({}, usage)],
        "realtime_tokens_total": [({"mode": m}, v) for m, v in engine.realtime_tokens.items()],
        "cuda_graph_passes_total": [({"mode": m}, v) for m, v in engine.passes.items()],
    }
    if engine.requests_total:
        samples["prompt_tokens_total"] = [({}, engine.prompt_tokens_total)]
        samples["generation_tokens_total"] = [({}, engine.generation_tokens_total)]
        samples["num_requests_total"] = [({}, engine.requests_total)]
    if engine.cached_tokens_total:
        samples["cached_tokens_total"] = [({"cache_source": "device"}, engine.cached_tokens_total)]
    samples["http_requests_total"] = [
        ({"endpoint": endpoint, "method": method}, count)
        for (endpoint, method), count in engine.http_requests.items()
    ]
    samples["http_responses_total"] = [
        ({"endpoint": endpoint, "method": method, "status_code": code}, count)
        for (endpoint, method, code), count in engine.http_responses.items()
    ]
    lines = []
    for name, (kind, help_text, side) in METRICS.items():
        if not samples.get(name):
            continue
        lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}"]
        for extra, value in samples[name]:
            labels = {"scheduler": scheduler, "tokenizer": tokenizer, "http": {}}[side] | extra
            text = ",".join(f'{key}="{labels[key]}"' for key in sorted(labels))
            lines.append(f"sglang:{name}{{{text}}} {float(value)}")
    for name, (histogram, side) in HISTOGRAMS.items():
        if not getattr(engine, histogram).count:
            continue
        lines += [f"# HELP sglang:{name} {HISTOGRAM_HELP[name]}", f"# TYPE sglang:{name} histogram"]
        for suffix, extra, value in getattr(engine, histogram).samples():
            labels = {**(scheduler if side == "scheduler" else tokenizer), **extra}
            text = ",".join(f'{key}="{labels[key]}"' for key in sorted(labels))
            lines.append(f"sglang:{name}{suffix}{{{text}}} {float(value)}")
    return "\n".join(lines) + "\n"


HISTOGRAMS = {
    "time_to_first_token_seconds": ("ttft", "tokenizer"),
    "inter_token_latency_seconds": ("itl", "tokenizer"),
    "e2e_request_latency_seconds": ("e2e", "tokenizer"),
    "queue_time_seconds": ("queue_time", "scheduler"),
}
HISTOGRAM_HELP = {
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
    "queue_time_seconds": "Histogram of queueing time in seconds.",
}


def validation_error(where: str, name: str, expected: str) -> web.Response:
    """FastAPI's 422 answer for a malformed request."""
    detail = [{"type": "value_error", "loc": [where, name], "msg": f"expected {expected}"}]
    return web.json_response({"detail": detail}, status=422)


def parse_mode(text: str) -> dict[str, str]:
    mode = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        sep = "=" if "=" in item else ":" if ":" in item else None
        key, value = item.split(sep, 1) if sep else (item, "1")
        mode[key.strip()] = value.strip()
    return mode


def merge_config_file(argv: list[str]) -> list[str]:
    """sglang's ConfigArgumentMerger, reduced: `--config FILE.yaml` -> `--key value` first."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    with open(argv[at + 1]) as file:
        data = yaml.safe_load(file) or {}
    merged = [token for key, value in data.items() for token in (f"--{key}", str(value))]
    return merged + argv[:at] + argv[at + 2 :]


def parse_args(argv: list[str]):
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-path", default="/models/test-model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--tp-size", type=int, default=None)
    parser.add_argument("--max-running-requests", type=int, default=1024)
    parser.add_argument("--test-mode", default=os.environ.get("TEST_ENGINE_MODE", ""))
    parser.add_argument("--step-base-ms", type=float, default=8.0)
    parser.add_argument("--step-per-req-ms", type=float, default=0.25)
    parser.add_argument("--prefill-us-per-token", type=float, default=2.0)
    parser.add_argument("--stream-interval", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=202752)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--attention-backend", default=None)
    # CUDA graphs are on unless this is given, as in sglang (the model's graph factors).
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--cuda-graph-max-bs", type=int, default=256)
    parser.add_argument("--disable-piecewise-cuda-graph", action="store_true")
    parser.add_argument("--moe-runner-backend", default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=DEFAULT_MEM_FRACTION_STATIC)
    parser.add_argument("--max-total-tokens", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--disable-radix-cache", action="store_true")
    parser.add_argument("--skip-server-warmup", action="store_true")
    parser.add_argument("--decode-log-interval", type=int, default=40)
    parser.add_argument("--pp-max-micro-batch-size", type=int, default=None)
    args, unknown = parser.parse_known_args(merge_config_file(argv))
    args.unknown = unknown
    args.mode = parse_mode(args.test_mode)
    if args.mode.get("mode-file") and Path(args.mode["mode-file"]).is_file():
        args.mode.update(parse_mode(Path(args.mode["mode-file"]).read_text().strip()))
    return args


class Log:
    def __init__(self, ranks: int):
        self.ranks = ranks

    def stamp(self, rank: int | None = None) -> str:
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        return f"[{now} TP{rank}]" if rank is not None else f"[{now}]"

    def line(self, text: str, rank: int | None = None) -> None:
        sys.stdout.write(f"{self.stamp(rank)} {text}\n")
        sys.stdout.flush()

    def all_ranks(self, text: str) -> None:
        for rank in range(self.ranks):
            self.line(text, rank)

    def raw(self, text: str, end: str = "\n") -> None:
        sys.stdout.write(text + end)
        sys.stdout.flush()


class Histogram:
    """A prometheus histogram's cumulative buckets, as sglang 0.5.11 declares them."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1

    def samples(self) -> list[tuple[str, dict, float]]:
        rows = [("_sum", {}, self.sum)]
        pairs = zip(self.bounds, self.counts, strict=True)
        rows += [("_bucket", {"le": str(bound)}, count) for bound, count in pairs]
        return rows + [("_bucket", {"le": "+Inf"}, self.count), ("_count", {}, self.count)]


# sglang 0.5.11's buckets (observability/metrics_collector.py, as its /metrics shows them).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                80.0, 100.0, 200.0, 400.0)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
               80.0, 100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)  # fmt: skip
QUEUE_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0,
                 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0,
                 3000.0)  # fmt: skip
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
               0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)  # fmt: skip


class Request:
    __slots__ = (
        "rid", "input_ids", "prompt_tokens", "cached_tokens", "max_new", "generated", "queue",
        "started", "kv_tokens", "counted", "last_token_at",
    )  # fmt: skip

    def __init__(
        self,
        prompt_tokens: int = 1,
        max_new: int = 16,
        input_ids: tuple[int, ...] | None = None,
        counted: bool = True,
    ):
        """input_ids: the prompt's tokens (None: `prompt_tokens` tokens the prefix cache
        never matches). counted=False: sglang's health generation, which its request
        metrics do not count."""
        self.rid = uuid.uuid4().hex
        self.input_ids = None if input_ids is None else tuple(input_ids)
        self.prompt_tokens = prompt_tokens if input_ids is None else len(self.input_ids)
        self.cached_tokens = 0  # the prompt's prefix found in the prefix cache on admission
        self.max_new = max(1, max_new)
        self.kv_tokens = 0  # set on submit: what it holds in the KV pool
        self.generated = 0
        self.queue: asyncio.Queue = asyncio.Queue()
        self.started = time.perf_counter()
        self.last_token_at = self.started
        self.counted = counted


class PrefixCache:
    """sglang's radix cache as a caller sees it: after prefill a prompt is stored as whole
    pages, each keyed by a hash chain (a page's key hashes the key before it with the page's
    tokens); a later prompt matches page by page from its start, up to its last token, which
    is always computed (its logits give the first output token). Least recently used pages
    go when the cache would outgrow the KV pool, a prefix's first pages last."""

    def __init__(self, page_size: int, capacity_tokens: int, enabled: bool = True):
        self.page = max(1, page_size)
        self.capacity_pages = max(1, capacity_tokens // self.page)
        self.enabled = enabled
        self.pages: OrderedDict[int, None] = OrderedDict()

    def _chain(self, ids: tuple[int, ...], tokens: int):
        key = 0
        for start in range(0, tokens - tokens % self.page, self.page):
            key = hash((key, ids[start : start + self.page]))
            yield key

    def match(self, ids: tuple[int, ...] | None) -> int:
        """The cached tokens at the start of this prompt (whole pages)."""
        if not self.enabled or not ids:
            return 0
        found = []
        for key in self._chain(ids, len(ids) - 1):
            if key not in self.pages:
                break
            found.append(key)
        self._touch(found)
        return len(found) * self.page

    def insert(self, ids: tuple[int, ...] | None) -> None:
        if not self.enabled or not ids:
            return
        keys = list(self._chain(ids, len(ids)))
        for key in keys:
            self.pages[key] = None
        self._touch(keys)
        while len(self.pages) > self.capacity_pages:
            self.pages.popitem(last=False)

    def _touch(self, keys: list[int]) -> None:
        for key in reversed(keys):
            self.pages.move_to_end(key)

    def flush(self) -> None:
        self.pages.clear()

    @property
    def tokens(self) -> int:
        return len(self.pages) * self.page


class Engine:
    """Continuous batching with a step time that grows with the batch: throughput saturates.

    Counters as sglang 0.5.11 keeps them: the scheduler's realtime tokens by mode advance
    with every step; the tokenizer's per-request totals when a request finishes."""

    def __init__(self, args, log: Log | None = None, clock=time.monotonic, start_index: int = 0):
        """start_index: how many starts the cache folder saw before this one (the seed of
        start-effect= and run-noise=, with seed=)."""
        self.args = args
        self.log = log
        self.clock = clock
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.cached_tokens_total = 0
        self.requests_total = 0
        self.realtime_tokens: dict[str, int] = {}  # by mode, in the order first counted
        self.passes: dict[str, int] = {}  # forward passes by CUDA-graph mode, likewise
        self.ttft = Histogram(TTFT_BUCKETS)  # seconds from arrival to the first token
        self.itl = Histogram(ITL_BUCKETS)  # seconds between a request's tokens
        self.e2e = Histogram(E2E_BUCKETS)  # seconds from arrival to the last token
        self.queue_time = Histogram(QUEUE_BUCKETS)  # seconds waiting before admission
        # sglang's HTTP metrics (http_requests_total, http_responses_total) per
        # (endpoint, method) and (endpoint, method, status code), in the order first counted.
        self.http_requests: dict[tuple[str, str], int] = {}
        self.http_responses: dict[tuple[str, str, str], int] = {}
        self.frozen = False
        self.wake = asyncio.Event()
        self.last_gen_throughput = 0.0
        self.last_cache_hit_rate = 0.0
        self.kv_tokens = kv_pool_tokens(args)
        self.kv_used = 0
        self.cache = PrefixCache(args.page_size, self.kv_tokens, not args.disable_radix_cache)
        # sglang's pp_max_micro_batch_size (the flag, else --max-running-requests): the
        # admission limit /set_internal_state moves.
        self.max_micro_batch = args.pp_max_micro_batch_size or max(args.max_running_requests, 1)
        self.updated_args = {
            "pp_max_micro_batch_size": self.max_micro_batch,
            "speculative_accept_threshold_single": 1.0,
            "speculative_accept_threshold_acc": 1.0,
        }
        self.noise = float(args.mode.get("noise", 0))
        self.rng = random.Random(int(args.mode.get("seed", 0)))
        self.cold_s = float(args.mode.get("cold", 0))
        self.noise_seed = noise_seed(args.mode, start_index)
        self.start_factor = lognormal(
            f"start-effect:{self.noise_seed}", float(args.mode.get("start-effect", 0))
        )
        self.run_noise = float(args.mode.get("run-noise", 0))
        self.run_noise_s = float(args.mode.get("run-noise-s", DEFAULT_RUN_NOISE_S))
        self.run_factors: dict[int, float] = {}
        self.drift = float(args.mode.get("drift", 0))
        self.slow = float(args.mode.get("slow", 1))
        self.serving_since: float | None = None
        self.decode_steps = 0
        self.tokens_since_decode_log = 0
        self.last_decode_log = self.last_prefill_log = clock()

    def submit(self, request: Request) -> None:
        request.kv_tokens = request_kv_tokens(self.args, request.prompt_tokens, request.max_new)
        self.waiting.append(request)
        self.wake.set()

    async def loop(self) -> None:
        while True:
            if self.frozen:
                await asyncio.sleep(3600)
                continue
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                continue
            new = self.admit()
            await asyncio.sleep(self.step_ms(len(self.running), prefill_tokens(new)) / 1e3)
            if self.frozen:
                continue
            self.finish_step(new)

    def finish_step(self, new: list[Request]) -> None:
        """What one step did: the new requests' prompts prefilled (and cached), one token for
        every running request, the counters and sglang's batch log lines."""
        if new:
            computed = prefill_tokens(new)
            cached = sum(r.cached_tokens for r in new)
            for request in new:
                self.cache.insert(request.input_ids)
            self.count_realtime("prefill_compute", computed)
            self.count_realtime("prefill_cache", cached)
            self.log_prefill(len(new), computed, cached)
            piecewise = not self.args.disable_piecewise_cuda_graph
            self.count_pass("prefill_cuda_graph" if piecewise else "prefill_none")
        graphed = not self.args.disable_cuda_graph
        graphed = graphed and len(self.running) <= self.args.cuda_graph_max_bs
        self.count_pass("decode_cuda_graph" if graphed else "decode_none")
        self.count_realtime("decode", len(self.running))
        self.decode_steps += 1
        self.tokens_since_decode_log += len(self.running)
        if self.decode_steps % max(1, self.args.decode_log_interval) == 0:
            self.log_decode()
        still = []
        now = time.perf_counter()
        for request in self.running:
            if request.counted:  # sglang's TTFT and inter-token latency histograms
                gap = now - request.last_token_at
                (self.itl if request.generated else self.ttft).observe(gap)
            request.last_token_at = now
            request.generated += 1
            done = request.generated >= request.max_new
            if done or request.generated % self.args.stream_interval == 0:
                request.queue.put_nowait(done)
            if not done:
                still.append(request)
            else:
                self.kv_used -= request.kv_tokens
                self.count_finished(request)
        self.running = still

    def count_realtime(self, mode: str, tokens: int) -> None:
        if tokens:  # as prometheus_client: a mode appears once it is first counted
            self.realtime_tokens[mode] = self.realtime_tokens.get(mode, 0) + tokens

    def count_pass(self, mode: str) -> None:
        self.passes[mode] = self.passes.get(mode, 0) + 1

    def count_finished(self, request: Request) -> None:
        """sglang's observe_one_finished_request (the tokenizer's counters)."""
        if request.counted:
            self.e2e.observe(time.perf_counter() - request.started)
            self.prompt_tokens_total += request.prompt_tokens
            self.generation_tokens_total += request.generated
            self.cached_tokens_total += request.cached_tokens
            self.requests_total += 1

    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)

    def scheduler_line(self, text: str) -> None:
        if self.log is not None:
            self.log.line(text, 0 if self.log.ranks > 1 else None)

    def log_prefill(self, new_seqs: int, computed: int, cached: int) -> None:
        """sglang 0.5.11 report_prefill_stats (observability/scheduler_metrics_mixin.py)."""
        now = self.clock()
        gap, self.last_prefill_log = now - self.last_prefill_log, now
        usage = self.used_tokens() / self.kv_tokens if self.kv_tokens else 0.0
        self.last_cache_hit_rate = cached / (computed + cached) if computed + cached else 0.0
        self.scheduler_line(
            f"Prefill batch, #new-seq: {new_seqs}, #new-token: {computed}, "
            f"#cached-token: {cached}, token usage: {usage:.2f}, "
            f"#running-req: {len(self.running) - new_seqs}, #queue-req: {len(self.waiting)}, "
            f"#pending-token: 0, cuda graph: {not self.args.disable_cuda_graph}, "
            f"input throughput (token/s): {computed / gap if gap > 0 else 0.0:.2f}"
        )

    def log_decode(self) -> None:
        """sglang 0.5.11 report_decode_stats: every --decode-log-interval decode steps, which
        is also when gen_throughput is measured."""
        now = self.clock()
        gap, self.last_decode_log = now - self.last_decode_log, now
        self.last_gen_throughput = self.tokens_since_decode_log / gap if gap > 0 else 0.0
        self.tokens_since_decode_log = 0
        used = self.used_tokens()
        usage = used / self.kv_tokens if self.kv_tokens else 0.0
        self.scheduler_line(
            f"Decode batch, #running-req: {len(self.running)}, #token: {used}, "
            f"token usage: {usage:.2f}, cuda graph: {not self.args.disable_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}"
        )

    def admit(self) -> list[Request]:
        """Move waiting requests to the running batch, first come, first served, while the
        running limit (pp_max_micro_batch_size), the KV pool and the prefill chunk allow;
        the first request that does not fit waits, and so do those behind it. A prompt's
        cached prefix costs no prefill."""
        budget = self.args.chunked_prefill_size
        new: list[Request] = []
        prefill = 0
        for request in self.waiting:
            if len(self.running) + len(new) >= self.max_micro_batch:
                break
            alone = not self.running and not new  # a request larger than the pool still runs
            if self.kv_used + request.kv_tokens > self.kv_tokens and not alone:
                break
            cached = self.cache.match(request.input_ids)
            extend = request.prompt_tokens - cached
            if budget and budget > 0 and new and prefill + extend > budget:
                break
            request.cached_tokens = cached
            if request.counted:
                self.queue_time.observe(time.perf_counter() - request.started)
            new.append(request)
            prefill += extend
            self.kv_used += request.kv_tokens
        self.waiting = self.waiting[len(new) :]
        self.running += new
        return new

    def idle(self) -> bool:
        return not self.running and not self.waiting

    def flush_cache(self) -> bool:
        """sglang 0.5.11 Scheduler.flush_cache: only when nothing runs or waits."""
        if not self.idle():
            self.scheduler_line(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}"
            )
            return False
        self.cache.flush()
        self.decode_steps = 0
        self.scheduler_line("Cache flushed successfully!")
        return True

    def global_server_args(self) -> dict:
        """The scheduler's server args: the flags with what /set_internal_state changed."""
        return {**server_args_dict(self.args), **self.updated_args}

    def set_internal_state(self, server_args: dict) -> bool:
        """sglang 0.5.11 Scheduler.set_internal_state: all keys applied, or none."""
        limit = self.args.max_running_requests
        for key, value in server_args.items():
            if key not in UPDATABLE_SERVER_ARGS:
                self.scheduler_line(f"Updating {key} is not supported.")
                return False
            if key == "pp_max_micro_batch_size" and (
                not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit
            ):
                self.scheduler_line(
                    f"Updating {key} to {value} is rejected because it is out of the valid "
                    f"range [1, {limit}]."
                )
                return False
        self.updated_args.update(server_args)
        self.max_micro_batch = self.updated_args["pp_max_micro_batch_size"]
        self.wake.set()
        args_text = ", ".join(f"{k}={v!r}" for k, v in self.global_server_args().items())
        self.scheduler_line(
            f"Global server args updated! get_global_server_args()=ServerArgs({args_text})"
        )
        return True

    def step_ms(self, running: int, prefill_tokens: int) -> float:
        """The model's step time, with the noise model applied: noise= (each step),
        start-effect= (this start), run-noise= (this run-noise-s window), drift= and cold=
        (time since serving began)."""
        step = predicted_step_ms(self.args, running, prefill_tokens) * self.start_factor
        step *= self.slow
        if self.noise > 0:
            step *= self.rng.lognormvariate(0.0, self.noise)
        if self.serving_since is None:
            return step
        serving_s = max(0.0, self.clock() - self.serving_since)
        if self.cold_s and serving_s < self.cold_s:
            step *= COLD_FACTOR
        if self.run_noise > 0 and self.run_noise_s > 0:
            step *= self.run_factor(int(serving_s // self.run_noise_s))
        return step * (1.0 + self.drift * serving_s / 60.0)

    def run_factor(self, window: int) -> float:
        """The run-noise= factor of one run-noise-s window of serving."""
        if window not in self.run_factors:
            self.run_factors[window] = lognormal(
                f"run-noise:{self.noise_seed}:{window}", self.run_noise
            )
        return self.run_factors[window]


def lognormal(seed: str, sigma: float) -> float:
    """One lognormal factor of that sigma, the same for the same seed (1.0 for sigma 0)."""
    return random.Random(seed).lognormvariate(0.0, sigma) if sigma > 0 else 1.0


def noise_seed(mode: dict[str, str], start_index: int) -> str:
    """What start-effect= and run-noise= draw from: seed= and the start's index in the cache
    folder, or, with no seed=, this process (a fresh draw every start)."""
    if "seed" in mode:
        return f"{mode['seed']}:{start_index}"
    return f"pid:{os.getpid()}"


def cache_dir() -> Path:
    """The engine's cache folder: $SGLANG_CACHE_DIR, else $XDG_CACHE_HOME/sglang, else
    ~/.cache/sglang."""
    if os.environ.get("SGLANG_CACHE_DIR"):
        return Path(os.environ["SGLANG_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "sglang"
    return Path.home() / ".cache" / "sglang"


def write_file_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def next_start_index(folder: Path) -> int:
    """How many starts this cache folder counted before this one; counts this one."""
    folder.mkdir(parents=True, exist_ok=True)
    counter = folder / START_COUNTER
    with open(folder / f"{START_COUNTER}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = counter.read_text().strip() if counter.exists() else ""
        index = int(text) if text.isdigit() else 0
        write_file_atomically(counter, f"{index + 1}\n")
    return index


def kernel_key(args) -> dict:
    """The flags that shape the compiled kernels and captured graphs (the JIT marker's key)."""
    return {
        "attention_backend": args.attention_backend,
        "moe_runner_backend": args.moe_runner_backend,
        "cuda_graph": not args.disable_cuda_graph,
        "max_running_requests": args.max_running_requests,
        "chunked_prefill_size": args.chunked_prefill_size,
    }


def jit_marker(args, folder: Path) -> Path:
    digest = hashlib.sha256(json.dumps(kernel_key(args), sort_keys=True).encode()).hexdigest()
    return folder / JIT_FOLDER / f"{digest[:16]}.json"


def prefill_tokens(new: list[Request]) -> int:
    """The prompt tokens a step computes for its new requests: the cached prefixes are free."""
    return sum(r.prompt_tokens - r.cached_tokens for r in new)


def text_for(tokens: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(tokens))


def prompt_ids(body: dict) -> tuple[int, ...]:
    """The prompt's tokens: /generate's input_ids, else the text cut into 4-character pieces
    (one token each, at least one), so texts that share a start share tokens."""
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids:
        flat = [t for part in ids for t in part] if isinstance(ids[0], list) else ids
        return tuple(int(t) for t in flat)
    text = body.get("text") or ""
    if isinstance(text, list):
        text = " ".join(map(str, text))
    text = str(text)
    pieces = [text[i : i + 4] for i in range(0, len(text) // 4 * 4, 4)] or [text]
    return tuple(zlib.crc32(piece.encode()) for piece in pieces)


class Server:
    def __init__(self, args, log: Log, start_index: int = 0):
        self.args = args
        self.log = log
        self.mode = args.mode
        self.engine = Engine(args, log, start_index=start_index)
        self.ready = False
        self.gracefully_exit = False
        self.exiting = False
        self.served_name = args.served_model_name or args.model_path
        self.serving_since: float | None = None
        self.generate_calls = 0

    async def warm_up(self) -> None:
        """sglang 0.5.11 _execute_server_warmup: one /generate of 8 tokens, counted in the
        request metrics like any other."""
        body = {"text": WARMUP_PROMPT}
        job = Request(input_ids=prompt_ids(body), max_new=8)
        self.engine.submit(job)
        while not await job.queue.get():
            pass

    # --- failure injection -------------------------------------------------------
    def crash_now(self, where: str) -> None:
        name = self.mode.get("crash")
        oom_above = self.mode.get("oom-above")
        if not name and oom_above and self.args.mem_fraction_static > float(oom_above):
            name = "oom"
        if not name or CRASHES.get(name, ("", []))[0] != where:
            return
        lines = CRASHES[name][1]
        rank = self.log.ranks - 1 if self.log.ranks > 1 else None
        if TRACEBACK in lines:
            at = lines.index(TRACEBACK)
            for line in lines[:at]:
                self.log.line(line, rank)
            self.log.line(SCHEDULER_EXCEPTION, rank)
            for line in lines[at + 1 :]:
                self.log.raw(line)
            self.log.raw("")
        else:
            for line in lines:
                self.log.raw(line)
        self.log.line(SIGQUIT_LINE)
        sys.stdout.flush()
        os._exit(1)

    def wedged(self) -> bool:
        if "hang" in self.mode and self.ready:
            return True
        after = self.mode.get("wedge-after")
        return bool(
            after and self.serving_since and time.monotonic() - self.serving_since >= float(after)
        )

    async def watch_wedge(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            if self.wedged() and not self.engine.frozen:
                self.engine.frozen = True
                self.log.line("Decode batch stuck: no progress (test engine wedged)", 0)

    # --- HTTP --------------------------------------------------------------------
    async def health_generate(self, request):
        """sglang 0.5.11 serves /health and /health_generate with this one handler: 503 while
        starting or draining, else one single-token generation, answered after
        `health-wait` seconds (sglang sleeps 1 s before looking; default 0 here)."""
        if not self.ready or self.gracefully_exit:
            return web.Response(status=503, text="starting")
        if self.wedged():
            await asyncio.sleep(3600)
        job = Request(prompt_tokens=1, max_new=1, counted=False)
        self.engine.submit(job)
        await job.queue.get()
        await asyncio.sleep(float(self.mode.get("health-wait", 0)))
        return web.Response(text="")

    async def generate(self, request):
        """Served as soon as the port is open, the warm-up running, as sglang 0.5.11 does."""
        body = await request.json()
        self.generate_calls += 1
        self.crash_now("generate")
        sampling = body.get("sampling_params") or {}
        max_new = int(sampling.get("max_new_tokens") or 16)
        job = Request(input_ids=prompt_ids(body), max_new=max_new)
        self.engine.submit(job)
        if not body.get("stream"):
            while not await job.queue.get():
                pass
            reply = self._chunk(job, final=True)
            if "empty-text" in self.mode:
                reply["text"] = ""
            return web.json_response(reply)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        while True:
            done = await job.queue.get()
            data = json.dumps(self._chunk(job, final=done))
            await response.write(f"data: {data}\n\n".encode())
            if done:
                break
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chunk(self, job: Request, final: bool) -> dict:
        return {
            "text": text_for(job.generated),
            "output_ids": [1000 + i for i in range(job.generated)],
            "meta_info": {
                "id": job.rid,
                "finish_reason": {"type": "length", "length": job.max_new} if final else None,
                "prompt_tokens": job.prompt_tokens,
                "weight_version": "default",
                "completion_tokens": job.generated,
                "cached_tokens": job.cached_tokens,
                "e2e_latency": round(time.perf_counter() - job.started, 6),
            },
        }

    async def server_info(self, request):
        """sglang 0.5.11 /server_info: the launcher's server args (where
        pp_max_micro_batch_size keeps its flag value), the scheduler's info, and
        internal_states, one dict per DP rank with the scheduler's live args."""
        engine = self.engine
        internal = {
            **engine.global_server_args(),
            "last_gen_throughput": engine.last_gen_throughput,
            "memory_usage": {
                "weight": 53.25,
                "kvcache": round(engine.kv_tokens * KV_GB_PER_TOKEN, 2),
                "token_capacity": engine.kv_tokens,
                "graph": 0.31,
            },
            "effective_max_running_requests_per_dp": self.args.max_running_requests,
        }
        return web.json_response(
            {
                **server_args_dict(self.args),
                "max_total_num_tokens": engine.kv_tokens,
                "internal_states": [internal],
                "version": "0.5.10.post1-test-engine",
            }
        )

    async def set_internal_state(self, request):
        """sglang 0.5.11: one `updated` per DP rank, true even when the scheduler refused the
        value (it logs why and keeps the old one)."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        server_args = body.get("server_args") if isinstance(body, dict) else None
        if not isinstance(server_args, dict):
            return validation_error("body", "server_args", 'a JSON object {"server_args": {...}}')
        self.engine.set_internal_state(server_args)
        return web.json_response([True])

    async def model_info(self, request):
        return web.json_response(
            {
                "model_path": self.args.model_path,
                "tokenizer_path": self.args.model_path,
                "is_generation": True,
                "weight_version": "default",
            }
        )

    async def models(self, request):
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": self.served_name,
                        "max_model_len": self.args.context_length,
                    }
                ],
            }
        )

    async def metrics(self, request):
        return web.Response(
            text=render_metrics(self.engine, self.served_name), content_type="text/plain"
        )

    async def flush_cache(self, request):
        """sglang 0.5.11 /flush_cache: refused (400) while requests run or wait, unless
        ?timeout=SECONDS lets it wait that long for the engine to go idle."""
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            timeout = -1.0
        if not timeout >= 0:
            return validation_error("query", "timeout", "a number of seconds >= 0")
        deadline = time.monotonic() + timeout
        while timeout > 0 and not self.engine.idle() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if timeout > 0 and not self.engine.idle():
            self.log.line("Deferred flush_cache timed out while waiting for idle state.")
            return web.Response(status=400, text="Timed out waiting for idle state.")
        if not self.engine.flush_cache():
            return web.Response(status=400, text="Flush cache failed.\n")
        return web.Response(text=FLUSHED)

    @web.middleware
    async def api_key_middleware(self, request, handler):
        """sglang/srt/utils/auth.py: /health* and /metrics* are open, the rest needs the key."""
        key = self.args.api_key
        if key and not request.path.startswith(("/health", "/metrics")):
            parts = request.headers.get("Authorization", "").split(" ", 1)
            if len(parts) != 2 or parts[0].lower() != "bearer" or parts[1] != key:
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    @web.middleware
    async def http_metrics_middleware(self, request, handler):
        """sglang's HTTP metrics (--enable-metrics): each request and its answer's status
        per route; a failure counts as a 500."""
        route = (request.path, request.method)
        counts = self.engine.http_requests
        counts[route] = counts.get(route, 0) + 1
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            answered = self.engine.http_responses
            key = (*route, str(status))
            answered[key] = answered.get(key, 0) + 1

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=64 * 1024 * 1024,
            middlewares=[self.http_metrics_middleware, self.api_key_middleware],
        )
        app.router.add_get("/health", self.health_generate)
        app.router.add_get("/health_generate", self.health_generate)
        app.router.add_post("/generate", self.generate)
        for path in ("/get_server_info", "/server_info"):
            app.router.add_get(path, self.server_info)
        for path in ("/get_model_info", "/model_info"):
            app.router.add_get(path, self.model_info)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/flush_cache", self.flush_cache)
        for method in ("POST", "PUT"):
            app.router.add_route(method, "/set_internal_state", self.set_internal_state)
        return app


async def start_up(server: Server) -> None:
    """Print the start-up phases as SGLang does, with the injected failures."""
    log, args, mode = server.log, server.args, server.mode
    log.line(
        f"server_args=ServerArgs(model_path='{args.model_path}', tp_size={args.tp_size}, "
        f"api_key={args.api_key!r}, "
        f"max_running_requests={args.max_running_requests}, "
        f"skip_server_warmup={args.skip_server_warmup}, "
        "disable_flashinfer_autotune=False)"
    )
    log.all_ranks("Init torch distributed begin.")
    server.crash_now("start")
    log.all_ranks("Init torch distributed ends. elapsed=0.25 s, mem usage=0.43 GB")
    log.line("Load weight begin. avail mem=94.12 GB", 0)
    load_s = float(mode.get("load", "0.5"))
    stall_at = int(mode["stall-at"]) if "stall-at" in mode else None
    shards = 80
    for step in range(11):
        pct = step * 10
        log.raw(
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | "
            f"{shards * step // 10}/{shards} [00:{step:02d}<00:00,  1.00it/s]",
            end="\r",
        )
        if stall_at is not None and pct >= stall_at:
            await asyncio.sleep(10**6)
        if step == 5:
            server.crash_now("load")
        if step < 10:
            await asyncio.sleep(load_s / 10)
    log.raw("")
    log.all_ranks(
        f"Load weight end. elapsed={load_s:.2f} s, type={MODEL_CLASS}, "
        "avail mem=40.87 GB, mem usage=53.25 GB."
    )
    server.crash_now("kv")
    kv_tokens = server.engine.kv_tokens
    kv_gb = kv_tokens * KV_GB_PER_TOKEN
    log.all_ranks(f"KV Cache is allocated. #tokens: {kv_tokens}, KV size: {kv_gb:.2f} GB")
    log.line("Memory pool end. avail mem=8.12 GB", 0)
    log.line("Running FlashInfer autotune...", 0)
    await asyncio.sleep(0.1)
    log.line("FlashInfer autotune completed.", 0)
    log.line("Capture piecewise CUDA graph begin. avail mem=8.10 GB", 0)
    began = time.monotonic()
    server.crash_now("graph")
    log.line(f"Capture cuda graph num tokens {list(PIECEWISE_TOKENS)}", 0)
    await compile_kernels(log, args, float(mode.get("jit", 0)))
    log.line(
        f"Capture piecewise CUDA graph end. Time elapsed: {time.monotonic() - began:.2f} s. "
        "mem usage=0.31 GB. avail mem=7.79 GB.",
        0,
    )
    chunked = args.chunked_prefill_size or DEFAULT_CHUNKED_PREFILL_SIZE
    log.line(
        f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={chunked}, "
        "max_prefill_tokens=16384, "
        f"max_running_requests={args.max_running_requests}, "
        f"context_len={args.context_length}, available_gpu_mem=7.79 GB"
    )


async def compile_kernels(log: Log, args, jit_s: float) -> None:
    """jit=SECONDS: a start with no marker for these kernel flags in the cache folder spends
    that long compiling (sglang's piecewise graph compile, with its progress bar), then
    writes the marker; a start that finds it compiles nothing."""
    if jit_s <= 0:
        return
    marker = jit_marker(args, cache_dir())
    if marker.exists():
        return
    shapes = len(PIECEWISE_TOKENS)
    per_shape = jit_s / shapes
    rate = f"{per_shape:5.2f}s/it" if per_shape >= 1 else f"{1 / per_shape:5.2f}it/s"  # tqdm's
    order = (*reversed(PIECEWISE_TOKENS), PIECEWISE_TOKENS[0])  # tqdm's last line: 100%
    for done, tokens in enumerate(order):
        pct = done * 100 // shapes
        bar = ("█" * (pct // 10)).ljust(10)
        elapsed = done * per_shape
        log.raw(
            f"Compiling num tokens (num_tokens={tokens}): {pct:3d}%|{bar}| {done}/{shapes} "
            f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<00:00, {rate}]",
            end="\r",
        )
        if done < shapes:
            await asyncio.sleep(per_shape)
    log.raw("")
    log.line(f"Compiling a graph for dynamic shape takes {per_shape:.2f} s", 0)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(marker, json.dumps(kernel_key(args), sort_keys=True) + "\n")
    except OSError:
        pass  # a cache folder it cannot write: every start compiles, as sglang's would


async def main_async(args) -> None:
    ranks = int(args.mode.get("ranks", "2"))
    log = Log(ranks)
    counts_starts = "seed" in args.mode and (
        "start-effect" in args.mode or "run-noise" in args.mode
    )
    server = Server(args, log, next_start_index(cache_dir()) if counts_starts else 0)
    rank_child = spawn_rank_process("ignore-sigterm" in args.mode)
    if "linger-output" in args.mode:
        linger = float(args.mode["linger-output"])
        code = f"import time\ntime.sleep({linger})\n"
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if "ignore-sigterm" in args.mode:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
    asyncio.create_task(server.engine.loop())
    asyncio.create_task(server.watch_wedge())
    asyncio.create_task(watch_scheduler(rank_child, log, server))
    await start_up(server)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=4096)
    await site.start()
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    log.raw(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    if not args.skip_server_warmup:
        await server.warm_up()
    server.ready = True
    server.serving_since = server.engine.serving_since = time.monotonic()
    log.line("The server is fired up and ready to roll!")
    await stop.wait()
    # sglang 0.5.11 SignalHandler.sigterm_handler + TokenizerManager.sigterm_watchdog
    log.line("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    server.gracefully_exit = True
    check_s = float(args.mode.get("drain-check", "0.5"))
    while True:
        remaining = len(server.engine.running) + len(server.engine.waiting)
        log.line(f"Gracefully exiting... Remaining number of requests {remaining}.")
        if remaining == 0:
            break
        await asyncio.sleep(check_s)
    await asyncio.sleep(0.05)  # let the last streamed chunks leave
    await runner.cleanup()
    server.exiting = True
    if rank_child.poll() is None:  # kill_process_tree: the scheduler goes with SIGKILL
        rank_child.kill()
        rank_child.wait(5)


async def watch_scheduler(rank_child: subprocess.Popen, log: Log, server: Server) -> None:
    """sglang's SubprocessWatchdog: a scheduler that dies takes the server down at once."""
    while rank_child.poll() is None or server.exiting:
        if server.exiting:
            return
        await asyncio.sleep(0.1)
    code = rank_child.returncode
    log.line(
        f"Subprocess scheduler_0 (pid={rank_child.pid}) crashed with exit code {code}. "
        "Triggering SIGQUIT for cleanup..."
    )
    log.line(SIGQUIT_LINE)
    sys.stdout.flush()
    os._exit(1)


def spawn_rank_process(ignore_sigterm: bool) -> subprocess.Popen:
    """A child in the same process group, as SGLang's scheduler ranks are.

    It dies with the launcher (PR_SET_PDEATHSIG), as sglang's scheduler does.
    """
    code = (
        "import ctypes, os, signal, sys, time\n"
        "ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
        f"if os.getppid() != {os.getpid()}:\n    sys.exit(0)\n"
    )
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "while True:\n    time.sleep(1)\n"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
