"""A stand-in for `python -m sglang.launch_server`, for tests only (never installed as the engine).

Longer than 400 lines: one self-contained file, because the lab and Molecule copy it
into containers as a single script.

Speaks the part of SGLang's HTTP surface that glm5svc and `sglang.bench_serving
--backend sglang` use: /health, /health_generate, /generate (streaming
`data: {...}\\n\\n` chunks with cumulative text and meta_info, then `data: [DONE]`),
/get_server_info, /get_model_info, /v1/models, /metrics (sglang: counters), /flush_cache.
Accepts launch_server-style arguments (--host, --port, --model-path, ...; the rest is
ignored) and prints SGLang-like log lines for each start-up phase.

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
one token; at most --max-running-requests run, the rest queue. Prefill adds
prefill_us_per_token * new input tokens to the step. Flags: --step-base-ms (8),
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
      lose at high, as the reference deployment saw.
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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import yaml
from aiohttp import web

MODEL_CLASS = "GlmMoeDsaForCausalLM"
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
    parser.add_argument("--moe-runner-backend", default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=DEFAULT_MEM_FRACTION_STATIC)
    parser.add_argument("--max-total-tokens", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--page-size", type=int, default=1)
    args, unknown = parser.parse_known_args(merge_config_file(argv))
    args.unknown = unknown
    args.mode = parse_mode(args.test_mode)
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


class Request:
    __slots__ = (
        "rid", "prompt_tokens", "max_new", "generated", "queue", "started", "prefilled",
        "kv_tokens",
    )  # fmt: skip

    def __init__(self, prompt_tokens: int, max_new: int):
        self.rid = uuid.uuid4().hex
        self.prompt_tokens = prompt_tokens
        self.max_new = max(1, max_new)
        self.kv_tokens = 0  # set on submit: what it holds in the KV pool
        self.generated = 0
        self.queue: asyncio.Queue = asyncio.Queue()
        self.started = time.perf_counter()
        self.prefilled = False


class Engine:
    """Continuous batching with a step time that grows with the batch: throughput saturates."""

    def __init__(self, args):
        self.args = args
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.frozen = False
        self.wake = asyncio.Event()
        self.last_gen_throughput = 0.0
        self.kv_tokens = kv_pool_tokens(args)
        self.kv_used = 0
        self.noise = float(args.mode.get("noise", 0))
        self.rng = random.Random(int(args.mode.get("seed", 0)))
        self.cold_s = float(args.mode.get("cold", 0))
        self.serving_since: float | None = None

    def submit(self, request: Request, log_metrics: bool = True) -> None:
        """log_metrics=False: sglang's health generation, which its metrics do not count."""
        request.kv_tokens = request_kv_tokens(self.args, request.prompt_tokens, request.max_new)
        self.waiting.append(request)
        self.requests_total += int(log_metrics)
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
            prefill_tokens = sum(r.prompt_tokens for r in new)
            step_s = self.step_ms(len(self.running), prefill_tokens) / 1e3
            await asyncio.sleep(step_s)
            if self.frozen:
                continue
            self.prompt_tokens_total += prefill_tokens
            self.generation_tokens_total += len(self.running)
            self.last_gen_throughput = len(self.running) / step_s
            still = []
            for request in self.running:
                request.generated += 1
                done = request.generated >= request.max_new
                if done or request.generated % self.args.stream_interval == 0:
                    request.queue.put_nowait(done)
                if not done:
                    still.append(request)
                else:
                    self.kv_used -= request.kv_tokens
            self.running = still

    def admit(self) -> list[Request]:
        """Move waiting requests to the running batch, first come, first served, while the
        batch ceiling, the KV pool and the prefill chunk allow; the first request that does
        not fit waits, and so do those behind it."""
        budget = self.args.chunked_prefill_size
        new: list[Request] = []
        prefill = 0
        for request in self.waiting:
            if len(self.running) + len(new) >= self.args.max_running_requests:
                break
            alone = not self.running and not new  # a request larger than the pool still runs
            if self.kv_used + request.kv_tokens > self.kv_tokens and not alone:
                break
            if budget and budget > 0 and new and prefill + request.prompt_tokens > budget:
                break
            new.append(request)
            prefill += request.prompt_tokens
            self.kv_used += request.kv_tokens
        self.waiting = self.waiting[len(new) :]
        self.running += new
        return new

    def step_ms(self, running: int, prefill_tokens: int) -> float:
        """The model's step time, with noise= and cold= applied."""
        step = predicted_step_ms(self.args, running, prefill_tokens)
        if self.noise > 0:
            step *= self.rng.lognormvariate(0.0, self.noise)
        if self.cold_s and self.serving_since is not None:
            if time.monotonic() - self.serving_since < self.cold_s:
                step *= COLD_FACTOR
        return step


def text_for(tokens: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(tokens))


def count_prompt_tokens(body: dict) -> int:
    if isinstance(body.get("input_ids"), list):
        return len(body["input_ids"])
    text = body.get("text") or ""
    if isinstance(text, list):
        text = " ".join(map(str, text))
    return max(1, len(str(text)) // 4)


class Server:
    def __init__(self, args, log: Log):
        self.args = args
        self.log = log
        self.mode = args.mode
        self.engine = Engine(args)
        self.ready = False
        self.gracefully_exit = False
        self.exiting = False
        self.served_name = args.served_model_name or args.model_path
        self.serving_since: float | None = None
        self.generate_calls = 0

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
        job = Request(prompt_tokens=1, max_new=1)
        self.engine.submit(job, log_metrics=False)
        await job.queue.get()
        await asyncio.sleep(float(self.mode.get("health-wait", 0)))
        return web.Response(text="")

    async def generate(self, request):
        if not self.ready:
            return web.json_response({"error": {"message": "Server is starting"}}, status=503)
        body = await request.json()
        self.generate_calls += 1
        self.crash_now("generate")
        sampling = body.get("sampling_params") or {}
        max_new = int(sampling.get("max_new_tokens") or 16)
        job = Request(count_prompt_tokens(body), max_new)
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
                "cached_tokens": 0,
                "e2e_latency": round(time.perf_counter() - job.started, 6),
            },
        }

    async def server_info(self, request):
        return web.json_response(
            {
                "model_path": self.args.model_path,
                "served_model_name": self.served_name,
                "tp_size": self.args.tp_size or 1,
                "max_running_requests": self.args.max_running_requests,
                "context_length": self.args.context_length,
                "mem_fraction_static": self.args.mem_fraction_static,
                "max_total_num_tokens": self.engine.kv_tokens,
                "attention_backend": self.args.attention_backend,
                "moe_runner_backend": self.args.moe_runner_backend,
                "disable_cuda_graph": self.args.disable_cuda_graph,
                "chunked_prefill_size": self.args.chunked_prefill_size,
                "page_size": self.args.page_size,
                "version": "0.5.10.post1-test-engine",
                "internal_states": [{"last_gen_throughput": self.engine.last_gen_throughput}],
            }
        )

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
        engine, label = self.engine, f'model_name="{self.served_name}"'
        lines = []
        for name, kind, value in (
            ("num_running_reqs", "gauge", len(engine.running)),
            ("num_queue_reqs", "gauge", len(engine.waiting)),
            ("gen_throughput", "gauge", engine.last_gen_throughput),
            ("token_usage", "gauge", engine.kv_used / engine.kv_tokens if engine.kv_tokens else 0),
            ("cache_hit_rate", "gauge", 0.0),
            ("prompt_tokens_total", "counter", engine.prompt_tokens_total),
            ("generation_tokens_total", "counter", engine.generation_tokens_total),
            ("num_requests_total", "counter", engine.requests_total),
        ):
            lines += [
                f"# HELP sglang:{name} {name}",
                f"# TYPE sglang:{name} {kind}",
                f"sglang:{name}{{{label}}} {float(value)}",
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def flush_cache(self, request):
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.")

    @web.middleware
    async def api_key_middleware(self, request, handler):
        """sglang/srt/utils/auth.py: /health* and /metrics* are open, the rest needs the key."""
        key = self.args.api_key
        if key and not request.path.startswith(("/health", "/metrics")):
            parts = request.headers.get("Authorization", "").split(" ", 1)
            if len(parts) != 2 or parts[0].lower() != "bearer" or parts[1] != key:
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=64 * 1024 * 1024, middlewares=[self.api_key_middleware]
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
        app.router.add_route("*", "/flush_cache", self.flush_cache)
        return app


async def start_up(server: Server) -> None:
    """Print the start-up phases as SGLang does, with the injected failures."""
    log, args, mode = server.log, server.args, server.mode
    log.line(
        f"server_args=ServerArgs(model_path='{args.model_path}', tp_size={args.tp_size}, "
        f"api_key={args.api_key!r}, "
        f"max_running_requests={args.max_running_requests}, skip_server_warmup=False, "
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
    server.crash_now("graph")
    log.line(
        "Capture piecewise CUDA graph end. Time elapsed: 0.10 s. mem usage=0.31 GB. "
        "avail mem=7.79 GB.",
        0,
    )
    chunked = args.chunked_prefill_size or DEFAULT_CHUNKED_PREFILL_SIZE
    log.line(
        f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={chunked}, "
        "max_prefill_tokens=16384, "
        f"max_running_requests={args.max_running_requests}, "
        f"context_len={args.context_length}, available_gpu_mem=7.79 GB"
    )


async def main_async(args) -> None:
    ranks = int(args.mode.get("ranks", "2"))
    log = Log(ranks)
    server = Server(args, log)
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
    log.line(
        "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False",
        0,
    )
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
