"""The service configuration (/etc/glm5/glm5.yaml): schema, defaults, loading, validation.

Defaults reproduce the reference deployment (8x RTX PRO 6000 Blackwell, SM120), described
in docs/reference-deployment.md. Unknown keys are errors; every problem is
reported with its key path, what was wrong and what is allowed.

Longer than 400 lines: the schema is one model per section with its validators, and
the single definition of every key; split, a key's rules would be spread over files.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import stat
import typing
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from glm5svc import paths
from glm5svc.config_yaml import YamlDocument, parse_yaml, read_config_bytes, read_regular_bytes
from glm5svc.errors import ConfigError
from glm5svc.targets import DEFAULT_TARGET, get_target, known_targets

DEFAULT_CONFIG_PATH = Path("/etc/glm5/glm5.yaml")
CONFIG_ENV_VAR = "GLM5SVC_CONFIG"

NCCL_P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
# NCCL's legacy integer levels: 0..5 -> LOC, PIX, PXB, PHB, SYS, SYS.
NCCL_P2P_LEGACY = {0: "LOC", 1: "PIX", 2: "PXB", 3: "PHB", 4: "SYS", 5: "SYS"}

# Bounds keep every accepted number usable: a timeout of 1e300 s passes "positive" but
# overflows threading and socket timeouts (OverflowError) inside `serve`.
MAX_SECONDS = 30 * 24 * 3600.0
MAX_COUNT = 2**31 - 1
# The steady measurement reads the engine's counters at most this far apart (glm5svc/bench/
# engine_sampler.py; five reads a window when that is more often); a window is the counters'
# advance between reads, so none is shorter. The longest is a day: a run sized to it must
# still end within its time limit.
ENGINE_READ_INTERVAL_S = 0.5
MAX_WINDOW_S = 86400.0
# Strict: an integer key takes an integer only (`port: true` is not --port 1, `port: 1e3`
# not 1000); a number key takes an integer or a decimal, never true/false.
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]
Port = Annotated[Int, Field(ge=1, le=65535)]
PositiveInt = Annotated[Int, Field(gt=0, le=MAX_COUNT)]
PositiveFloat = Annotated[Number, Field(gt=0, le=MAX_SECONDS)]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOOPBACK_HOSTS = ("localhost", "::1")
SECRETS_FILE_KEY = "api-key"


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_problem(value: str) -> str | None:
    """Why `value` is not an address to listen on or connect to (None when it is): an IPv4
    or IPv6 address, or a host name (RFC 1123 labels)."""
    if value.startswith("[") and value.endswith("]"):
        return f"'{value}': write an IPv6 address without brackets, e.g. ::1"
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if value and len(value) <= 253 and all(_HOST_LABEL.match(label) for label in labels):
        if not labels[-1].isdigit():
            return None
    return (
        f"{value!r} is not an IP address or a host name (letters, digits, '-' and '.', no "
        "spaces or ports), e.g. 127.0.0.1, 0.0.0.0, ::1 or gpu1.example.org"
    )


def checked_host(value: str) -> str:
    if problem := host_problem(value):
        raise ValueError(problem)
    return value


class Section(BaseModel):
    # allow_inf_nan=False: `.inf`, `.nan` and `1e400` (read as infinity) are refused.
    # use_attribute_docstrings: the string under each key is its description, from which
    # the example config and docs/configuration.md are generated (glm5svc/docgen.py).
    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        frozen=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class ModelSection(Section):
    """The model: its checkpoint and the name clients ask for."""

    path: Path = Path("/models/GLM-5-NVFP4")
    """Checkpoint directory (config.json, hf_quant_config.json, the weight shards); absolute."""
    served_name: str = Field("glm-5", min_length=1)
    """The name clients use in "model"."""
    tokenizer_path: Path | None = None
    """Tokenizer directory; null: the model directory."""
    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    """auto: sglang reads the shards; dummy: random weights, no shards (test models only)."""

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path (got '{value}')")
        return value


class ServerSection(Section):
    """The sglang server glm5svc launches."""

    host: str = Field("127.0.0.1", min_length=1)
    """Address sglang listens on (an IP address or a host name); beyond loopback it needs
    api_key_file, or allow_unauthenticated: true."""
    port: Port = 30000
    """sglang's HTTP port."""
    api_key_file: Path | None = None
    """File with the API key (one line, absolute path, not readable by others: 0600 or 0640):
    sglang gets it in a 0600 --config file, never in argv; null: no key."""
    allow_unauthenticated: bool = False
    """true: the engine may listen beyond loopback with no API key, and anyone who reaches it may
    use the model; false refuses such a configuration."""
    profile: str = "cu128"
    """The pinned stack (glm5svc/data/profiles/): cu128 is sglang 0.5.10.post1 on CUDA 12.8, cu130
    sglang 0.5.11 on CUDA 13.0."""
    python: Path = Path("/opt/glm5/venv/bin/python")
    """The interpreter of the venv with sglang."""
    command: list[str] | None = None
    """Replaces "<python> -m sglang.launch_server" (tests run the test engine this way); null:
    sglang."""
    extra_args: list[str] = Field(default_factory=list)
    """sglang flags appended last; a warning names each planned flag they override."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the server; a warning names each planned variable it overrides."""
    secret_env: list[str] = Field(default_factory=list)
    """Names in server.env whose values are secret: redacted from logs, never shown in /status."""
    cuda_home: Path | None = None
    """The CUDA toolkit for the server; null: the profile's (cu128: /usr/local/cuda-12.8)."""
    cache_dir: Path | None = None
    """The engine's home and compile caches (FlashInfer's JIT and MoE autotune results, torch
    compile, DeepGEMM, Triton), shared by glm5.service and tune's trials so that a second
    start skips the compiling; null: ~/.cache/glm5 of the user who runs glm5svc (the
    glm5_service role sets /var/cache/glm5)."""
    enable_metrics: bool = True
    """sglang's /metrics: the progress counters honest health checks read."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """sglang's log level."""

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return checked_host(value)

    @field_validator("api_key_file")
    @classmethod
    def _absolute_key_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError(
                f"must be an absolute path (got '{value}'): the service runs in "
                "/var/lib/glm5 (WorkingDirectory), where a relative path names another file"
            )
        return value

    @field_validator("command")
    @classmethod
    def _non_empty_command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must be a non-empty list of program and arguments, or null")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"'{name}' is not a valid environment variable name (letters, digits and "
                    "'_', not starting with a digit)"
                )
        return value

    @model_validator(mode="after")
    def _secret_env_listed(self) -> ServerSection:
        unknown = [name for name in self.secret_env if name not in self.env]
        if unknown:
            raise ValueError(f"secret_env names {unknown}, which server.env does not set")
        return self


class GpusSection(Section):
    """The GPUs the server uses; each target's rules are in glm5svc/data/targets.yaml
    (docs/targets.md)."""

    # glm5svc/data/targets.yaml: backends, quantization, host checks, and the defaults of
    # expected_count and compute_capability below (sm120: 8 GPUs of 12.0).
    target: str = DEFAULT_TARGET
    """The GPU generation: sm120, sm100 or sm90 (its backends, quantization and host checks)."""
    expected_count: Annotated[Int, Field(ge=1, le=64)] = 8
    """GPUs used = tensor parallel size; default: the target's (sm120: 8)."""
    compute_capability: str = Field("12.0", pattern=r"^\d+\.\d+$")
    """The GPUs' compute capability, used when NVML is absent (planning on a machine without the
    GPUs); default: the target's. preflight checks the GPUs against it."""
    visible_devices: list[Annotated[Int, Field(ge=0, le=1023)]] | None = None
    """GPU indices to use, as many as expected_count, e.g. [0, 1, 2, 3]; null: all."""
    nccl_p2p_level: str = "SYS"
    """NCCL_P2P_LEVEL: LOC, NVL, PIX, PXB, PHB or SYS (legacy integers 0-5 are converted)."""

    @field_validator("nccl_p2p_level", mode="before")
    @classmethod
    def _p2p_level(cls, value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool) and value in NCCL_P2P_LEGACY:
            return NCCL_P2P_LEGACY[value]
        if isinstance(value, str) and value.upper() in NCCL_P2P_LEVELS:
            return value.upper()
        raise ValueError(f"must be one of {', '.join(NCCL_P2P_LEVELS)} or a legacy integer 0-5")

    @model_validator(mode="before")
    @classmethod
    def _target_defaults(cls, data: Any) -> Any:
        """expected_count and compute_capability default to the target's."""
        if not isinstance(data, dict):
            return data
        name = data.get("target", DEFAULT_TARGET)
        if not isinstance(name, str) or name not in known_targets():
            return data  # the field validator names the known targets
        target = get_target(name)
        defaults = {"expected_count": target.gpu_count}
        defaults["compute_capability"] = target.compute_capability
        return {**defaults, **data}

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str) -> str:
        if value not in known_targets():
            known = ", ".join(known_targets())
            raise ValueError(f"unknown target '{value}'; known targets: {known}")
        return value

    @model_validator(mode="after")
    def _devices_match_count(self) -> GpusSection:
        devices = self.visible_devices
        if devices is not None:
            if len(set(devices)) != len(devices):
                raise ValueError(f"visible_devices lists a GPU twice: {devices}")
            if len(devices) != self.expected_count:
                raise ValueError(
                    f"visible_devices has {len(devices)} GPUs but expected_count is "
                    f"{self.expected_count}; make them agree (tensor parallel size = GPUs used)"
                )
        return self


class TuningSection(Section):
    """sglang's tuning; a null backend or quantization is the target's choice for the model
    (`glm5svc command --explain` gives the reasons)."""

    mem_fraction_static: Annotated[Number, Field(gt=0.0, lt=1.0)] = 0.92
    """Share of GPU memory for the weights and the KV pool (--mem-fraction-static)."""
    max_running_requests: Annotated[Int, Field(ge=1, le=65536)] = 1024
    """Requests the engine runs at once (--max-running-requests)."""
    cuda_graph: bool = False
    """CUDA graphs; the reference deployment ran with them off."""
    radix_cache: Literal["auto", "on", "off"] = "auto"
    """The prefix cache; auto: on only when the NSA FP8 prefill fix is in place (`glm5svc patch`
    reports it)."""
    quantization: Literal["modelopt_fp4", "none"] | None = None
    """null: the target's choice (sm120 with GLM-5: modelopt_fp4)."""
    attention_backend: (
        Literal["flashinfer", "triton", "fa3", "flashmla", "trtllm_mla", "nsa", "dsa"] | None
    ) = None
    """null: the target's choice (sm120 with GLM-5: flashinfer; with sglang 0.5.17+: dsa).
    dsa (nsa before sglang 0.5.13) runs the sparse-attention kernels below; on SM120 only with
    sglang 0.5.17 or later (profile cu130-0.5.23) and flashinfer_sparse_mla."""
    nsa_decode_backend: (
        Literal[
            "trtllm", "flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "flashinfer_sparse_mla"
        ]
        | None
    ) = None
    """Sparse-attention (DSA) models only, spelt --dsa-* from sglang 0.5.13; null: the target's
    choice (sm120: trtllm; with sglang 0.5.17+: flashinfer_sparse_mla). With attention_backend
    dsa on SM120 only flashinfer_sparse_mla runs (sglang 0.5.17+); trtllm is refused there."""
    nsa_prefill_backend: (
        Literal[
            "trtllm",
            "flashmla_sparse",
            "flashmla_kv",
            "fa3",
            "tilelang",
            "flashinfer_sparse_mla",
            "triton_sparse_mla",
        ]
        | None
    ) = None
    """DSA models only; null: the target's choice (sm120: trtllm; with sglang 0.5.17+:
    flashinfer_sparse_mla). With attention_backend dsa on SM120: flashinfer_sparse_mla
    (sglang 0.5.17+) or triton_sparse_mla (0.5.22+)."""
    moe_runner_backend: Literal["flashinfer_cutlass", "auto", "triton", "cutlass"] | None = None
    """MoE models only; null: the target's choice (sm120: flashinfer_cutlass)."""
    chunked_prefill_size: PositiveInt | None = None
    """Tokens per prefill chunk (--chunked-prefill-size); null: sglang's default."""
    disable_shared_experts_fusion: bool = False
    """true works around the "3072 vs 6144" load error."""
    omp_num_threads: Annotated[Int, Field(ge=1, le=256)] = 8
    """OMP_NUM_THREADS of the server's processes."""


class ServiceSection(Section):
    """`glm5svc serve` itself: its health listener, probes and time limits."""

    listen_host: str = "127.0.0.1"
    """Address of the health listener: /livez /readyz /status /metrics."""

    @field_validator("listen_host")
    @classmethod
    def _listen_host(cls, value: str) -> str:
        return checked_host(value)

    listen_port: Port = 9400
    """Port of the health listener (not server.port)."""
    run_preflight: bool = True
    """Run preflight before launching (a fatal problem exits 78)."""
    load_stall_timeout_s: PositiveFloat = 900.0
    """Give up loading when the log shows no progress this long, in seconds (Ollama's stall rule).
"""
    startup_timeout_s: PositiveFloat = 7200.0
    """Seconds from launch to ready, at most."""
    probe_interval_s: Annotated[Number, Field(ge=0.05, le=MAX_SECONDS)] = 10.0
    """Seconds between health probes of the engine (at least 0.05: more often busies it)."""
    probe_timeout_s: PositiveFloat = 30.0
    """Seconds one probe may take."""
    wedge_window_s: PositiveFloat = 300.0
    """No progress and failing probes this many seconds: the engine counts as wedged."""
    drain_timeout_s: PositiveFloat = 120.0
    """On stop, seconds sglang may finish the requests in flight before its processes are killed."""
    results_dir: Path = Path("/var/lib/glm5")
    """Where benchmark results and the last run's record go."""
    night_textfile: Path | None = Path("/var/lib/prometheus/node-exporter/glm5svc-night.prom")
    """The unattended night's metrics for node_exporter's textfile collector (its outcome, its
    deadline while one is in progress), written by the night whenever its folder exists, so
    that they outlive glm5.service; null: none. Debian's prometheus-node-exporter reads this
    folder (its collector.textfile.directory setting)."""


class TelemetrySection(Section):
    """The NVML sampler behind /metrics and `glm5svc telemetry`."""

    enabled: bool = True
    """Sample the GPUs while serving."""
    period_s: Annotated[Number, Field(ge=0.05, le=60)] = 1.0
    """Seconds between samples of power, clocks, utilisation and memory."""
    pcie_period_s: Annotated[Number, Field(ge=0.001, le=0.05)] = 0.02
    """The shortest interval, in seconds, between reads of the 32-bit PCIe counters (on GPUs
    without GPM): the sampler reads them less often while traffic is low, never later than 80 %
    of their wrap time (~68 ms at PCIe 5 x16); docs/performance-telemetry.md."""


class PostStartBenchmark(Section):
    """The benchmark `glm5svc serve` runs once the engine is ready."""

    enabled: bool = True
    """Run it."""
    ladder: list[PositiveInt] = Field(default_factory=lambda: [64])
    """Concurrency levels."""
    num_prompts_per_level: PositiveInt = 128
    """Prompts per level (steady: the first run's; later runs are sized to benchmark.window_s, so
    with the defaults a level takes a warm-up of two or more windows plus one measured)."""
    degrade_below_baseline: bool = False
    """Mark the service degraded (not unready) when the result is below the baseline."""


class BenchmarkSection(Section):
    """`glm5svc bench` and the post-start benchmark: sglang.bench_serving over a concurrency
    ladder."""

    python: Path | None = None
    """The interpreter that runs -m sglang.bench_serving (with sglang and what it imports, e.g.
    tqdm); null: server.python. `glm5svc bench --python` overrides it."""
    ladder: list[PositiveInt] = Field(default_factory=lambda: [64, 256, 512, 1024, 2048])
    """Concurrency levels, strictly increasing."""
    input_len: PositiveInt = 1024
    """Input tokens per prompt (random ids, fixed length); unused with a request_file."""
    output_len: PositiveInt = 512
    """Output tokens per request (fixed); unused with a request_file."""
    request_file: Path | None = None
    """A recorded workload instead of the fixed lengths: a JSON Lines file, one request a line,
    e.g. {"input_len": 812, "output_len": 230} (absolute path; docs/performance-bench.md). Each
    run sends new prompts of those lengths; results record the file's SHA-256, count and mean
    lengths, and bench compare judges only runs of the same file. null: fixed lengths."""
    prompts_per_concurrency: PositiveInt = 4
    """Prompts per level = max(min_prompts, prompts_per_concurrency x concurrency); steady: the
    first run's, later runs are sized to the window."""
    min_prompts: PositiveInt = 128
    """The fewest prompts a level gets (steady: its first run)."""
    warmup_requests: Annotated[Int, Field(ge=0, le=MAX_COUNT)] = 16
    """Requests before each level, not measured (single wave only: steady runs warm up in whole
    windows instead)."""
    seed: Annotated[Int, Field(ge=0, le=MAX_COUNT)] = 1
    """The first of the per-run seeds: the i-th measured window of every level, trial and side
    uses seed + i, so each run sends new prompts and windows pair across settings."""
    steady: bool = True
    """Measure each level in steady windows (glm5svc/bench/measure.py): fresh prompts per run
    (seed + i), the radix cache flushed, a warm-up until two windows agree, the figure from the
    engine's own counters while it holds the concurrency. false: the old single wave, one
    bench_serving run per level with ramps, the same seed every run and no flush: its figures
    are not comparable with steady ones, and bench compare gives no verdict between the two."""
    window_s: Annotated[Number, Field(ge=ENGINE_READ_INTERVAL_S, le=MAX_WINDOW_S)] = 300.0
    """The shortest steady window (seconds in which the engine holds the concurrency, ramps
    left out) a run must give; runs are sized to it. 300 s is for GLM-5 on its target: at 1024
    in / 512 out, concurrency 256 and the tuned 2-4k tok/s a request lives 100-200 s (C x (in +
    out) / tok/s), and a window of 1.5-3 request lifetimes averages the mix of prefills and
    decodes (each run adds about two lifetimes of ramps: 8-12 minutes a run). A small model on
    one GPU settles in about 30 s (docs/performance-bench.md). At least 0.5 (the engine's
    counters are read at most 0.5 s apart)."""
    windows: Annotated[Int, Field(ge=1, le=100)] = 1
    """Measured windows per level after the warm-up; the level's figure is their mean."""
    warmup_tolerance_pct: Annotated[Number, Field(gt=0, le=50)] = 3.0
    """Warm-up runs go on until two consecutive windows agree within this many percent."""
    warmup_max_s: Annotated[Number, Field(ge=0, le=2 * MAX_WINDOW_S)] = 1800.0
    """The longest warm-up per level, in seconds (then measuring starts, and says so): room for
    two or three runs of a 300 s window on the target, whose first runs after a start compile
    kernels and come in 20-40 % low. 0 for none, else at least two windows (2 x window_s), the
    fewest that can agree."""
    objective: Literal["output_tokens", "total_tokens"] = "output_tokens"
    """What `glm5svc tune` maximises: output tokens per second (what a client receives, and
    what sglang.bench_serving and sglang.auto_benchmark rank by), or total tokens per second
    (uncached prompt tokens plus output tokens, the engine's work). On a prefill-heavy
    workload total tokens move with the prefill bursts: on the H200 testbed they were about
    80 % prefill and spread wider from window to window than output tokens. Both are recorded;
    the other is a diagnostic."""
    prefix_sharing: Annotated[Number, Field(ge=0, le=1)] = 0.0
    """The share of prompt tokens the workload expects from the radix cache (0: none). At 0 the
    cache is flushed before every run, and a run with more than 1 % cached is flagged and not
    counted; above 0 nothing is flushed and the sharing is measured and reported."""
    knee_gain_pct: Annotated[Number, Field(ge=0, le=100)] = 10.0
    """The knee: the first level after which more concurrency adds less than this many percent of
    throughput while latency grows."""
    underused_power_share: Annotated[Number, Field(gt=0, le=1)] = 0.6
    """GPUs averaging under this share of their power limit at the best level count as under-used.
"""
    regression_threshold_pct: Annotated[Number, Field(gt=0, le=100)] = 5.0
    """A figure more than this many percent below the baseline's is a regression."""
    baseline: str | None = "reference-8x-rtx-pro-6000"
    """The baseline to compare with: a shipped name, a run directory or a summary file; null: none.
"""
    post_start: PostStartBenchmark = Field(default_factory=PostStartBenchmark)
    """The benchmark after each start."""

    @field_validator("request_file")
    @classmethod
    def _absolute_request_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError(
                f"must be an absolute path (got '{value}'): the service runs in /var/lib/glm5 "
                "(WorkingDirectory), where a relative path names another file"
            )
        return value

    @field_validator("ladder")
    @classmethod
    def _ladder(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("must list at least one concurrency level")
        if value != sorted(set(value)):
            raise ValueError(f"must be strictly increasing without repeats (got {value})")
        return value


def _http_url(value: str) -> str:
    example = "(e.g. http://10.0.0.11:9400)"
    if not value.startswith(("http://", "https://")) or len(value.split("//", 1)[1]) == 0:
        raise ValueError(f"'{value}' is not an http(s):// URL {example}")
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"'{value}' is not a usable URL: {exc} {example}") from None
    host = parts.hostname or ""
    if problem := host_problem(host):
        raise ValueError(f"'{value}': its host {problem}")
    if port == 0 or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(
            f"'{value}' must be scheme://host[:port] with a port 1-65535, no user, query or "
            f"fragment {example}"
        )
    return value.rstrip("/")


def http_url_problem(value: str) -> str | None:
    """Why `value` is not a glm5svc or engine URL (None when it is)."""
    try:
        _http_url(value)
    except ValueError as exc:
        return str(exc)
    return None


class FleetSection(Section):
    """Where `glm5svc status --fleet` looks: each replica's glm5svc listener (its /status;
    the replica's service.listen_host must be reachable from here) and the gateway (smg)."""

    replicas: list[str] = Field(default_factory=list)
    """Each replica's glm5svc listener, e.g. http://10.0.0.11:9400."""
    gateway: str | None = None
    """The gateway (smg), e.g. http://10.0.0.10:30000; null: none."""

    @field_validator("replicas")
    @classmethod
    def _replica_urls(cls, value: list[str]) -> list[str]:
        urls = [_http_url(url) for url in value]
        if len(set(urls)) != len(urls):
            raise ValueError(f"lists a replica twice: {urls}")
        return urls

    @field_validator("gateway")
    @classmethod
    def _gateway_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)


class MultinodeSection(Section):
    """One sglang engine across hosts (sglang's --nnodes/--node-rank/--dist-init-addr): the
    same config on every host but node_rank. docs/scale-out.md says when and what the network
    must provide."""

    nnodes: Annotated[Int, Field(ge=1, le=64)] = 1
    """Hosts in the engine (1: this host only); --tp-size = gpus.expected_count x nnodes."""
    node_rank: Annotated[Int, Field(ge=0, le=63)] = 0
    """This host's rank, 0..nnodes-1 (rank 0 serves HTTP)."""
    dist_init_addr: str | None = None
    """Rank 0's host:port for torch.distributed's rendezvous, the same on every node."""
    nccl_socket_ifname: str | None = None
    """The interface NCCL and gloo use between hosts (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)."""

    @field_validator("dist_init_addr")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(
                f"'{value}' is not host:port (rank 0's address and a free port, e.g. "
                "10.0.0.11:20000)"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MultinodeSection:
        if self.node_rank >= self.nnodes:
            raise ValueError(
                f"node_rank {self.node_rank} must be below nnodes {self.nnodes} (ranks 0..N-1)"
            )
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError(
                f"nnodes {self.nnodes} needs dist_init_addr: rank 0's host:port, the same "
                "on every node (e.g. 10.0.0.11:20000)"
            )
        return self


# The bucket bounds of sglang 0.5.11's histograms (srt/observability/metrics_collector.py, as
# its /metrics serves them: tests/fixtures/real_engine/*/metrics-under-load.txt). A latency
# objective's threshold is one of them: the rules count the requests in that bucket.
SGLANG_BUCKETS = {
    "time_to_first_token_seconds": (
        0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
        200.0, 400.0,
    ),
    "inter_token_latency_seconds": (
        0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
        0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
    ),
    "queue_time_seconds": (
        0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0,
        1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0,
    ),
}  # fmt: skip
# A share of good events: 0.5 (half) up to 0.99999 (five nines); 1 would leave no budget.
ObjectiveRatio = Annotated[Number, Field(ge=0.5, le=0.99999)]


class LatencyObjective(Section):
    """A latency objective: `target` of the events take at most `threshold_s`."""

    threshold_s: Number
    """The bound in seconds: one of the bucket bounds of sglang's histogram (the rules count
    the events in that bucket)."""
    target: ObjectiveRatio
    """The share of events that must be within threshold_s, e.g. 0.99."""


class ErrorObjective(Section):
    """An availability objective over the engine's generation endpoints."""

    target: ObjectiveRatio = 0.999
    """The share of responses that must not be a 5xx, e.g. 0.999 (a budget of 0.1 %)."""


def _latency(threshold_s: float, target: float):
    return Field(default_factory=lambda: LatencyObjective(threshold_s=threshold_s, target=target))


class MonitoringSection(Section):
    """What the Prometheus rules page on (`glm5svc rules` renders them; the monitoring role
    too, from its glm5_monitoring_objectives): the longest start that is not a failure, and
    the service-level objectives whose error budgets the burn-rate alerts watch, per replica,
    over 30 days (docs/observability.md)."""

    start_budget_s: Annotated[Number, Field(ge=60, le=MAX_SECONDS)] = 900.0
    """Seconds a replica may be not ready while it starts (or starts again after a crash)
    before GLM5StartTooLong pages. A cold start of GLM-5 on its target is planned at 6-7
    minutes; the default leaves twice that and a margin."""
    ttft: LatencyObjective = _latency(20.0, 0.99)
    """Time to first token (sglang:time_to_first_token_seconds); thresholds: 0.1, 0.2, 0.4,
    0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400."""
    itl: LatencyObjective = _latency(0.2, 0.99)
    """Inter-token latency (sglang:inter_token_latency_seconds); thresholds: 0.002, 0.004,
    0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6,
    0.8, 1, 2, 4, 6, 8."""
    queue_time: LatencyObjective = _latency(30.0, 0.99)
    """Time a request waits before its prefill (sglang:queue_time_seconds); thresholds: 0,
    0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, ... 100, 200, ... 1000, 1200, ... 2000,
    2500, 3000."""
    errors: ErrorObjective = Field(default_factory=ErrorObjective)
    """5xx answers of the generation endpoints (sglang:http_responses_total)."""
    runbook_url: str = "docs/observability.md"
    """Where your copy of docs/observability.md is served (e.g.
    https://git.example.org/glm5svc/blob/main/docs/observability.md): each alert's
    runbook_url is this and #<the alert's name in lower case>, its section there."""

    @field_validator("runbook_url")
    @classmethod
    def _no_fragment(cls, value: str) -> str:
        if "#" in value or not value.strip() or any(c.isspace() for c in value):
            raise ValueError(
                f"{value!r}: give the page's address without spaces and without '#' (each "
                "alert adds its own #section)"
            )
        return value

    @field_validator("ttft", "itl", "queue_time")
    @classmethod
    def _threshold_is_a_bucket(cls, value: LatencyObjective, info) -> LatencyObjective:
        family = OBJECTIVE_HISTOGRAMS[info.field_name]
        buckets = SGLANG_BUCKETS[family]
        if float(value.threshold_s) not in buckets:
            nearest = min(buckets, key=lambda b: abs(b - value.threshold_s))
            raise ValueError(
                f"threshold_s {value.threshold_s:g} is not a bucket bound of sglang:{family} "
                f"(the rules can only count whole buckets); use {nearest:g}, or one of "
                f"{', '.join(f'{b:g}' for b in buckets)}"
            )
        return value


# The latency objectives and the sglang histogram each reads.
OBJECTIVE_HISTOGRAMS = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "queue_time": "queue_time_seconds",
}


class Config(Section):
    model: ModelSection = Field(default_factory=ModelSection)
    server: ServerSection = Field(default_factory=ServerSection)
    gpus: GpusSection = Field(default_factory=GpusSection)
    tuning: TuningSection = Field(default_factory=TuningSection)
    service: ServiceSection = Field(default_factory=ServiceSection)
    telemetry: TelemetrySection = Field(default_factory=TelemetrySection)
    benchmark: BenchmarkSection = Field(default_factory=BenchmarkSection)
    fleet: FleetSection = Field(default_factory=FleetSection)
    multinode: MultinodeSection = Field(default_factory=MultinodeSection)
    monitoring: MonitoringSection = Field(default_factory=MonitoringSection)

    @model_validator(mode="after")
    def _ports_differ(self) -> Config:
        hosts = {self.service.listen_host, self.server.host}
        overlapping = len(hosts) == 1 or bool(hosts & {"0.0.0.0", "::"})
        if self.service.listen_port == self.server.port and overlapping:
            raise ValueError(
                f"service.listen_port and server.port are both {self.server.port}; "
                "the health listener needs its own port"
            )
        return self

    @model_validator(mode="after")
    def _warmup_holds_two_windows(self) -> Config:
        bench = self.benchmark
        if 0 < bench.warmup_max_s < 2 * bench.window_s:
            default = "" if "warmup_max_s" in bench.model_fields_set else " (the default)"
            raise ValueError(
                f"benchmark.warmup_max_s: {bench.warmup_max_s:g} s{default} holds fewer than two "
                f"windows of benchmark.window_s ({bench.window_s:g} s), so the warm-up could "
                "never see two windows agree; set benchmark.warmup_max_s to 0 (no warm-up) or "
                f"at least {2 * bench.window_s:g}, or shorten benchmark.window_s"
            )
        return self

    @model_validator(mode="after")
    def _quantization_fits_target(self) -> Config:
        target = get_target(self.gpus.target)
        if self.tuning.quantization == "modelopt_fp4" and not target.fp4:
            raise ValueError(
                f"tuning.quantization: modelopt_fp4 needs FP4 tensor cores, which target "
                f"{target.name} ({target.sm}) lacks; set tuning.quantization: none and serve "
                "an unquantized checkpoint, or set gpus.target"
            )
        return self


# For a function that takes the API key already read: "not read yet, read
# server.api_key_file here" (None means there is no key).
READ_KEY_FILE = object()


def read_api_key(key_file: Path | None) -> str | None:
    """The key in server.api_key_file (None when unset); ConfigError if unreadable or unusable.

    A usable key reaches sglang exactly: printable ASCII (it travels in an HTTP
    `Authorization: Bearer` header, which is Latin-1 at best), one line, and not starting
    with '-' (sglang turns its --config file into argv, where argparse would take such a
    value for an option).
    """
    if key_file is None:
        return None
    paths.API_KEY_FILE.check(key_file)
    try:
        key = read_regular_bytes(Path(key_file)).decode("utf-8").strip()
        mode = os.stat(key_file).st_mode
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(
            f"server.api_key_file: cannot read {key_file}: {reason}; create it "
            "(one line, the key) readable by the service, or set api_key_file: null"
        ) from None
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise ConfigError(
            f"server.api_key_file: {key_file} is mode {stat.S_IMODE(mode):04o}: every local "
            f"user can read or change the key; `chmod 600 {key_file}` (0640 for a group)"
        )
    if not key:
        raise ConfigError(f"server.api_key_file: {key_file} is empty; put the API key in it")
    bad = sorted({c for c in key if not (" " <= c <= "~")})
    if bad:
        raise ConfigError(
            f"server.api_key_file: the key in {key_file} contains {len(bad)} character(s) "
            f"other than printable ASCII ({', '.join(repr(c) for c in bad[:5])}); use letters, "
            "digits and punctuation only (for example `openssl rand -hex 32`)"
        )
    if key.startswith("-"):
        raise ConfigError(
            f"server.api_key_file: the key in {key_file} starts with '-', which sglang's "
            "argument parser would read as an option; choose a key that does not"
        )
    return key


def secrets_file_text(api_key: str) -> str:
    """sglang's --config YAML carrying the key, written by an emitter and read back to prove it.

    Hand-written `api-key: <key>` changes any key YAML reads as another type (`yes`, `1e3`,
    `null`), a comment (`#...`), an alias, a tag or a block indicator.
    """
    text = yaml.safe_dump({SECRETS_FILE_KEY: api_key}, default_flow_style=False, width=2**31 - 1)
    if yaml.safe_load(text) != {SECRETS_FILE_KEY: api_key}:
        raise ConfigError("server.api_key_file: this key cannot be written to YAML exactly")
    return text


def connect_host(host: str) -> str:
    """Where a local client reaches a server that listens on `host` (a wildcard: loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def exposure_warning(config: Config) -> str | None:
    """The engine is open to anyone who reaches it (None when it is not); a refusal unless
    server.allow_unauthenticated says so (exposure_problem), then a warning said by
    validate, command --explain, preflight and serve."""
    server = config.server
    if is_loopback(server.host) or server.api_key_file is not None:
        return None
    return (
        f"the engine listens on {server.host}:{server.port} with no API key: anyone who can "
        "reach this host can use the model"
    )


def exposure_problem(config: Config) -> str | None:
    """Why the configuration is refused for listening beyond loopback with no key."""
    warning = exposure_warning(config)
    if warning is None or config.server.allow_unauthenticated:
        return None
    return (
        f"server.host: {warning}. Fix: set server.api_key_file (a 0600 file with the key), "
        "or server.host: 127.0.0.1, or server.allow_unauthenticated: true to mean it"
    )


def resolve_config_path(cli_path: str | os.PathLike | None) -> Path:
    """--config wins, then $GLM5SVC_CONFIG, then /etc/glm5/glm5.yaml."""
    if cli_path:
        return Path(cli_path)
    if os.environ.get(CONFIG_ENV_VAR):
        return Path(os.environ[CONFIG_ENV_VAR])
    return DEFAULT_CONFIG_PATH


def example_config_path() -> Path:
    return Path(__file__).parent / "data" / "glm5.example.yaml"


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Load and validate the config file; raises ConfigError listing every problem."""
    config_path = resolve_config_path(path)
    paths.CONFIG.check(config_path)
    try:
        text = read_config_bytes(config_path)
    except OSError as exc:
        raise ConfigError(
            f"{config_path}: cannot read: {exc.strerror or exc}; make it a file readable by "
            "this user"
        ) from None
    return parse_config(text, source=str(config_path))


@contextmanager
def rules_of(path: str | os.PathLike | None) -> Iterator[None]:
    """Around the rules a command applies to the loaded file (the launch plan, the
    benchmark's): their ConfigError names the file, and the line of the key it starts with."""
    try:
        yield
    except ConfigError as exc:
        raise _located(exc, resolve_config_path(path)) from None


def _located(exc: ConfigError, config_path: Path) -> ConfigError:
    message = str(exc)
    named = _KEY_PATH.match(message)
    if not named or message.startswith(str(config_path)) or not config_path.is_file():
        return exc
    try:
        document = parse_yaml(read_config_bytes(config_path), str(config_path))
    except (OSError, ConfigError):
        return exc
    line = document.line_of(named.group().split("."))
    where = f"{config_path}, line {line}" if line else str(config_path)
    return ConfigError(f"{where}: {message}", problems=exc.problems)


def parse_config(text: str, source: str = "<config>") -> Config:
    document = parse_yaml(text, source)
    if document.data is None:
        document = YamlDocument({})
    if not isinstance(document.data, dict):
        raise ConfigError(
            f"{source}, line 1: the top level must be a mapping of sections "
            f"({', '.join(Config.model_fields)}), got {_yaml_kind(document.data)}; start "
            "with a section name, e.g. 'server:'"
        )
    return config_from_mapping(document.data, source, document)


def config_from_mapping(
    data: dict[str, Any], source: str = "<config>", document: YamlDocument | None = None
) -> Config:
    """The Config for a mapping read from `source`; `document` gives the lines of its keys."""
    document = document or YamlDocument(data)
    nul = [_at(document, path, problem) for path, problem in _nul_problems(data, ())]
    if nul:
        raise ConfigError(f"{source}: {len(nul)} problem(s)", problems=nul)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = [describe_error(err, document) for err in exc.errors()]
        raise ConfigError(f"{source}: {len(problems)} problem(s)", problems=problems) from None
    except RecursionError:  # a structure parse_yaml did not make (a cycle built in code)
        raise ConfigError(f"{source}: a value contains itself; write it out") from None


def _nul_problems(data: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Strings with a NUL byte (no path, name or argument can hold one), by key path."""
    if isinstance(data, str):
        return [(path, "contains a NUL character (\\0); remove it")] if "\0" in data else []
    if isinstance(data, dict):
        problems = []
        for key, value in data.items():
            if isinstance(key, str) and "\0" in key:
                problems.append(((*path, key), "the key contains a NUL character (\\0)"))
            problems += _nul_problems(value, (*path, key))
        return problems
    if isinstance(data, list):
        return [p for i, item in enumerate(data) for p in _nul_problems(item, (*path, i))]
    return []


def _at(document: YamlDocument | None, loc: tuple[Any, ...] | list[Any], problem: str) -> str:
    """`line N: key.path: problem` (no line when the mapping did not come from a file)."""
    key = ".".join(str(part) for part in loc) or "(top level)"
    if "\0" in key:
        key = repr(key)
    if not loc and (named := _KEY_PATH.match(problem)):  # a rule across sections
        line = document.line_of(named.group().split(".")) if document is not None else None
        return f"line {line}: {problem}" if line else f"{key}: {problem}"
    line = document.line_of(loc) if document is not None else None
    return f"line {line}: {key}: {problem}" if line else f"{key}: {problem}"


_KEY_PATH = re.compile(r"[a-z_]+(?:\.[a-z_]+)+")


# pydantic's error types, said as what the key must be and how to write it.
_MUST_BE = {
    "int_type": "must be a whole number, e.g. 8 (not true/false, not 8.0 or 1e3)",
    "int_parsing": "must be a whole number, e.g. 8 (not true/false, not 8.0 or 1e3)",
    "int_from_float": "must be a whole number, e.g. 8 (not true/false, not 8.0 or 1e3)",
    "float_type": "must be a number, e.g. 0.5 or 30 (not true/false)",
    "float_parsing": "must be a valid number, e.g. 0.5 or 30 (not true/false)",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": 'must be text; quote it ("...") if YAML reads it as something else',
    "path_type": "must be a path (text), e.g. /models/GLM-5-NVFP4",
    "list_type": "must be a list: [a, b], or one '- item' per line",
    "dict_type": "must be a mapping: 'key: value' lines indented under it",
    "model_type": "must be a mapping: 'key: value' lines indented under it",
    "model_attributes_type": "must be a mapping: 'key: value' lines indented under it",
    "finite_number": "must be a finite number (not .inf, .nan, or beyond 1e308)",
    "string_too_short": "must not be empty",
}


def describe_error(
    err: dict[str, Any], document: YamlDocument | None = None, schema: type[BaseModel] | None = None
) -> str:
    """One readable line per pydantic error: line, key path, what was wrong, what is allowed.
    `schema`: the model the file was validated with (the configuration's by default)."""
    loc = list(err["loc"])
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        return _at(document, loc, f"unknown key{_did_you_mean(loc, schema or Config)}")
    if kind == "literal_error":
        expected = err["ctx"]["expected"]
        return _at(document, loc, f"{_shown(given)} is not allowed; expected {expected}")
    message = _MUST_BE.get(kind) or err["msg"].removeprefix("Value error, ")
    message = message.replace("Input should be", "must be").replace("String should", "must")
    if _short(given) and not _says_value(message, given):
        message = f"{message} (got {_shown(given)})"
    return _at(document, loc, message)


def _says_value(message: str, given: Any) -> bool:
    """Whether a validator's message already shows the value (no "(got x) (got x)")."""
    return "(got " in message or (isinstance(given, str) and f"'{given}'" in message)


def _shown(value: Any) -> str:
    """A value as YAML writes it: true, null, 'text', 8."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


_YAML_KINDS = {list: "a list", str: "text", bool: "true/false", int: "a number", float: "a number"}


def _yaml_kind(value: Any) -> str:
    return _YAML_KINDS.get(type(value), type(value).__name__)


def _short(value: Any) -> bool:
    return not isinstance(value, dict | list | set | tuple) and len(_shown(value)) < 80


def section_keys(section: str) -> tuple[type[BaseModel], list[str]]:
    """A section's model and its keys, in the schema's order (`tuning` -> TuningSection)."""
    model = Config.model_fields[section].annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise KeyError(section)
    return model, list(model.model_fields)


def _did_you_mean(loc: list[str], schema: type[BaseModel]) -> str:
    """The hint for an unknown key: the keys allowed where it is, from the schema's model
    at that level (a knob's fields inside a knob, a section's keys inside a section)."""
    model = schema
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # a list's index or a mapping's key: the same model's items
        if (inner := inner_model(field.annotation)) is None:
            break
        model = inner
    allowed = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"{hint} (allowed here: {', '.join(allowed)})"


def inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside Optional, a list or a mapping's values.
    A list's index or a mapping's key in the key path then stays at that model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in reversed(typing.get_args(annotation)):
        if (model := inner_model(argument)) is not None:
            return model
    return None
