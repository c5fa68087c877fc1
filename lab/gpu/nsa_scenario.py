"""The NSA FP8 prefill crash on a real sglang 0.5.11, unpatched and then patched.

Run on the GPU machine with a scaled-down model of GLM-5's architecture
(GlmMoeDsaForCausalLM, random weights): start `sglang.launch_server` with FP8 KV cache
and the radix cache on, prime the radix cache with one long prompt, then send waves of
concurrent requests that share it, so that one prefill batch holds >= 8192 cached prefix
tokens and takes the MHA one-shot path. Then `glm5svc patch apply nsa-fp8-mha-prefix`
on the same site-packages, start again, send the same workload, and revert the patch.
docs/nsa-fp8-on-sm90.md explains, from sglang 0.5.11's code, why these flags reach the
crash on SM90 (and which do not).

`run()` never raises and never runs past `budget_s`: every wait has a deadline and the
server's process group is killed on the way out.

Longer than 400 lines: one scenario: the workload, the unpatched and the patched runs
and their deadlines together.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from glm5svc.child_group import spawn
from glm5svc.http_fetch import FetchError, post_json
from lab.gpu.common import FIRED_UP, NVLS_OFF, REPO, Deadline

PATCH_ID = "nsa-fp8-mha-prefix"
LOG_KEEP_BYTES = 2 * 1024 * 1024
STOP_GRACE_S = 30.0
# Held back from each phase's waits for the stop (grace + wait), and from the whole run
# for the final revert, so that run() ends within budget_s.
STOP_RESERVE_S = STOP_GRACE_S + 15
REVERT_RESERVE_S = 20.0
PATCHED_PHASE_S = 150.0
SETTLE_S = 3.0  # after the workload, for a dying scheduler to write its traceback

# sglang 0.5.11 takes the MHA one-shot path for a prefill batch whose summed cached
# prefix is >= SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD (default 8192) and whose summed
# sequence lengths fit 128 Ki tokens. PREFIX_LEN is a whole number of 64-token pages (the
# radix cache matches whole pages for DSA models); 16 requests per wave put 32768 cached
# tokens in a batch, so even a batch of 4 of them crosses the threshold.
PREFIX_LEN = 2048
SUFFIX_LEN = 64
WAVES = 4
PER_WAVE = 16
MAX_NEW_TOKENS = 8
VOCAB = 2048
CHUNKED_PREFIX_THRESHOLD = 8192
# (prefill, decode). One trtllm keeps the KV pool in the plain 576-wide MLA layout that
# FlashInfer reads, while forward_mha's guard (both trtllm) stays false. Neither NSA
# kernel runs: the attention backend is flashinfer. ("trtllm", "trtllm"), the reference
# deployment's flags, is guarded in 0.5.11 and must not crash.
NSA_BACKENDS = ("flashmla_kv", "trtllm")


def server_flags(
    model_dir: Path, port: int, nsa_backends: tuple[str, str] = NSA_BACKENDS
) -> list[str]:
    """The launch_server arguments (after `-m sglang.launch_server`)."""
    return [
        "--model-path", str(model_dir),
        "--load-format", "dummy",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--grammar-backend", "none",
        "--sampling-backend", "pytorch",
        "--mem-fraction-static", "0.5",
        "--enable-metrics",
        "--log-level", "info",
        "--kv-cache-dtype", "fp8_e4m3",
        # FlashInfer MLA (no FA3 needed) owns the metadata: its PrefillMetadata has no
        # page_table_1_flattened, as in the reference deployment.
        "--attention-backend", "flashinfer",
        "--nsa-prefill-backend", nsa_backends[0],
        "--nsa-decode-backend", nsa_backends[1],
        "--page-size", "64",
        "--chunked-prefill-size", "8192",
        "--max-total-tokens", "131072",
        "--disable-cuda-graph",
    ]  # fmt: skip


@dataclass
class Workload:
    prime: list[int]
    waves: list[list[list[int]]] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return 1 + sum(len(wave) for wave in self.waves)


def build_workload(
    prefix_len: int = PREFIX_LEN,
    suffix_len: int = SUFFIX_LEN,
    waves: int = WAVES,
    per_wave: int = PER_WAVE,
    vocab: int = VOCAB,
    seed: int = 0,
) -> Workload:
    """One priming prompt (the shared prefix) and waves of prompts that extend it.

    Token ids avoid 0..3 (the tiny tokenizer's specials)."""
    if prefix_len <= 0 or prefix_len % 64:
        raise ValueError(f"prefix_len must be a positive multiple of 64 (a page), not {prefix_len}")
    if per_wave * prefix_len < CHUNKED_PREFIX_THRESHOLD:
        raise ValueError(
            f"{per_wave} requests x {prefix_len} prefix tokens stay under the one-shot "
            f"threshold {CHUNKED_PREFIX_THRESHOLD}: raise per_wave or prefix_len"
        )
    rng = random.Random(seed)
    prefix = [rng.randrange(4, vocab) for _ in range(prefix_len)]
    work = Workload(prime=list(prefix))
    for _ in range(waves):
        wave = [
            prefix + [rng.randrange(4, vocab) for _ in range(suffix_len)] for _ in range(per_wave)
        ]
        work.waves.append(wave)
    return work


# Most specific first: the reference deployment's error, then what 0.5.11 may say instead.
SIGNATURES = [
    r"AttributeError: '\w+' object has no attribute 'page_table_1_flattened'",
    r"AssertionError: page_table_1_flattened should have been generated.*",
    r"(?:ImportError|ModuleNotFoundError|OSError): .*"
    r"(?:FA3|flash_ops|flashmla_ops|deep_gemm|ninja|nvcc).*",
    r"torch\.OutOfMemoryError: .*",
    r"RuntimeError: CUDA error: .*",
]
# sglang 0.5.11 logs this traceback at start when openai_harmony is absent and carries on
# (only /v1/responses is lost): not a failure (recorded on the H200, see tests/fixtures).
HARMLESS_EXCEPTION = re.compile(r"No module named 'openai_harmony'")
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b:?.*$")
_CACHED = re.compile(r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def find_signature(log_text: str) -> str | None:
    """The line that says why the engine failed, or None when nothing failed."""
    for pattern in SIGNATURES:
        found = re.search(pattern, log_text)
        if found:
            return found.group(0).strip()
    lines = log_text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if "Traceback (most recent call last)" in lines[i]:
            for line in lines[i + 1 :]:
                if _EXCEPTION_LINE.match(line) and not line.startswith(" "):
                    if HARMLESS_EXCEPTION.search(line):
                        break
                    return line.strip()
    for line in reversed(lines):
        if "Scheduler hit an exception" in line or "crashed with exit code" in line:
            return line.strip()
    return None


def prefill_batches(log_text: str) -> dict:
    """Prefill batches the scheduler logged: how many, and the most cached prefix in one."""
    batches = [tuple(int(x) for x in m.groups()) for m in _CACHED.finditer(log_text)]
    return {
        "prefill_batches": len(batches),
        "max_cached_tokens_in_batch": max((c for _, _, c in batches), default=0),
        "batches_over_threshold": sum(1 for _, _, c in batches if c >= CHUNKED_PREFIX_THRESHOLD),
    }


def launch_env(env: dict[str, str], site: Path) -> dict[str, str]:
    """The caller's env, checked, with the site's scripts (ninja) and nvcc on PATH."""
    wrong = {k: env.get(k) for k, v in NVLS_OFF.items() if env.get(k) != v}
    if wrong:
        raise ValueError(f"env must set {NVLS_OFF} (NVLink multicast off); got {wrong}")
    out = dict(env)
    path = [str(site / "bin")]
    if out.get("CUDA_HOME"):
        path.append(str(Path(out["CUDA_HOME"]) / "bin"))
    out["PATH"] = os.pathsep.join(path + [out.get("PATH", "/usr/bin:/bin")])
    python_path = [str(site), str(REPO)]
    out["PYTHONPATH"] = os.pathsep.join(python_path + [p for p in [out.get("PYTHONPATH")] if p])
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out


class Server:
    """One launch_server process in its own process group, its log in a file."""

    def __init__(self, python: str, flags: list[str], env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.group = spawn(
            [python, "-m", "sglang.launch_server", *flags],
            die_with_parent=False,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(REPO),
        )
        self.started_at = time.monotonic()

    def text(self) -> str:
        try:
            return self.log_path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.group.poll() is None

    def wait_ready(self, deadline: Deadline) -> bool:
        while deadline.left() > 0:
            if FIRED_UP in self.text():
                return True
            if not self.alive():
                return False
            time.sleep(0.5)
        return False

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict:
        """SIGTERM to the launcher, SIGKILL to the group after grace_s."""
        outcome = self.group.stop(grace_s)
        self._log.close()
        return {
            "exit_code": outcome.returncode,
            "stop_seconds": round(outcome.waited_s, 1),
            "group_killed": outcome.needed_kill,
        }


def _generate(port: int, input_ids: list[int], timeout: float) -> bool:
    body = {
        "input_ids": input_ids,
        "sampling_params": {
            "max_new_tokens": MAX_NEW_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
        },
    }
    url = f"http://127.0.0.1:{port}/generate"
    try:
        reply = post_json(url, body, timeout_s=max(timeout, 1.0))
    except FetchError:
        return False
    return isinstance(reply, dict) and "text" in reply


def drive(server: Server, port: int, work: Workload, deadline: Deadline) -> dict:
    """Prime, then waves of concurrent shared-prefix requests; stops once the server died."""
    ok = failed = 0
    if _generate(port, work.prime, timeout=min(120.0, deadline.left())):
        ok += 1
    else:
        failed += 1
    for wave in work.waves:
        if not server.alive() or deadline.left() < 5:
            failed += len(wave)
            continue
        results = _send_wave(port, wave, deadline)
        ok += sum(results)
        failed += len(results) - sum(results)
    return {"requests_ok": ok, "requests_failed": failed}


def _send_wave(port: int, wave: list[list[int]], deadline: Deadline) -> list[bool]:
    """All requests of a wave at once (a barrier), so the scheduler batches them."""
    results = [False] * len(wave)
    barrier = threading.Barrier(len(wave))
    timeout = min(120.0, deadline.left() - 2)

    def one(i: int) -> None:
        try:
            barrier.wait(timeout=10)
        except threading.BrokenBarrierError:
            pass
        results[i] = _generate(port, wave[i], timeout)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(wave))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(deadline.left(), 0.1))
    return results


def _truncate_log(path: Path, keep: int = LOG_KEEP_BYTES) -> None:
    try:
        data = path.read_bytes()
    except OSError:
        return
    if len(data) > keep:
        path.write_bytes(b"[... truncated: last %d bytes kept ...]\n" % keep + data[-keep:])


def run_phase(
    name: str,
    python: str,
    flags: list[str],
    env: dict[str, str],
    port: int,
    out: Path,
    work: Workload,
    deadline: Deadline,
    notes: list[str],
) -> dict:
    """One server start, the workload, the stop. Never raises."""
    result = {
        "started": False,
        "crashed": False,
        "signature": None,
        "requests_ok": 0,
        "requests_failed": 0,
        "seconds": 0.0,
    }
    t0 = time.monotonic()
    log_path = out / f"nsa-{name}.log"
    server = None
    waits = Deadline(deadline.left() - STOP_RESERVE_S)
    try:
        server = Server(python, flags, env, log_path)
        result["started"] = server.wait_ready(waits)
        result["start_seconds"] = round(time.monotonic() - t0, 1)
        if result["started"]:
            result.update(drive(server, port, work, waits))
            time.sleep(SETTLE_S)
        else:
            result["requests_failed"] = work.requests
            why = "exited" if not server.alive() else "was not ready before the deadline"
            notes.append(f"{name}: the server {why}; last log lines:")
            notes.extend(server.text().splitlines()[-60:])
        result["alive_after_workload"] = server.alive()
    except Exception as err:  # noqa: BLE001 - a failure is itself the finding
        notes.append(f"{name}: {type(err).__name__}: {err}")
    finally:
        if server is not None:
            text = server.text()
            served = text.split(FIRED_UP, 1)[1] if result["started"] else text
            result["signature"] = find_signature(served)
            result["crashed"] = bool(
                result["started"]
                and (
                    not result.get("alive_after_workload", False) or result["signature"] is not None
                )
            )
            result.update(prefill_batches(text))
            result.update(server.stop())
            _truncate_log(log_path)
            result["log"] = log_path.name
        result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def patch_cli(python: str, action: str, site: Path, env: dict[str, str], timeout: float) -> dict:
    """`glm5svc patch ACTION nsa-fp8-mha-prefix --site-packages SITE --json`, parsed."""
    where = ["--site-packages", str(site)]
    cmd = [python, "-m", "glm5svc", "patch", action, PATCH_ID, *where, "--json"]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=str(REPO), timeout=max(timeout, 5)
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "rc": None, "error": f"glm5svc patch {action} timed out"}
    try:
        reply = json.loads(proc.stdout)
    except ValueError:
        reply = {"ok": False, "error": (proc.stdout + proc.stderr)[-2000:]}
    reply["rc"] = proc.returncode
    return reply


def _verdict(reply: dict) -> str | None:
    for patch in reply.get("patches", []):
        if patch.get("id") == PATCH_ID:
            return patch.get("verdict")
    return None


def run(
    python: str,
    site: Path,
    model_dir: Path,
    out: Path,
    env: dict[str, str],
    port: int = 31000,
    budget_s: float = 420,
    nsa_backends: tuple[str, str] = NSA_BACKENDS,
) -> dict:
    """Unpatched, then patched: did the engine crash, and with what.

    Raises ValueError, before starting anything, when env does not turn NVLink multicast
    off (common.NVLS_OFF); otherwise never raises: errors land in "notes"."""
    wrong = {k: env.get(k) for k, v in NVLS_OFF.items() if env.get(k) != v}
    if wrong:
        raise ValueError(f"env must set {NVLS_OFF} (NVLink multicast off); got {wrong}")
    deadline = Deadline(budget_s - REVERT_RESERVE_S)
    flags = server_flags(model_dir, port, nsa_backends)
    notes: list[str] = []
    result: dict = {
        "unpatched": None,
        "patched": None,
        "flags": flags,
        "notes": notes,
        "workload": {
            "prefix_len": PREFIX_LEN,
            "suffix_len": SUFFIX_LEN,
            "waves": WAVES,
            "per_wave": PER_WAVE,
            "max_new_tokens": MAX_NEW_TOKENS,
        },
    }
    try:
        site, model_dir, out = Path(site), Path(model_dir), Path(out)
        out.mkdir(parents=True, exist_ok=True)
        run_env = launch_env(env, site)
        ninja = shutil.which("ninja", path=run_env["PATH"])
        result["ninja"] = ninja
        if ninja is None:
            notes.append("no ninja on PATH: FlashInfer's JIT (MLA, ragged prefill) cannot build")
        work = build_workload()

        status = patch_cli(python, "status", site, run_env, timeout=60)
        result["patch_status_before"] = _verdict(status)
        if _verdict(status) == "applied":
            notes.append("the patch was applied before the run (a stale run?): reverting first")
            patch_cli(python, "revert", site, run_env, timeout=60)
        elif _verdict(status) != "not_applied":
            notes.append(f"patch status: {json.dumps(status)[:2000]}")

        # The first start compiles (FlashInfer JIT, triton); the second reuses the on-disk
        # caches and needs about PATCHED_PHASE_S (start, workload, stop).
        first = Deadline(max(deadline.left() * 0.6, deadline.left() - PATCHED_PHASE_S))
        result["unpatched"] = run_phase(
            "unpatched", python, flags, run_env, port, out, work, _earlier(first, deadline), notes
        )

        applied = patch_cli(python, "apply", site, run_env, timeout=min(60, deadline.left()))
        result["patch_apply"] = {
            "ok": applied.get("ok"),
            "rc": applied.get("rc"),
            "verdict": _verdict(applied),
            "error": applied.get("error"),
        }
        if _verdict(applied) == "applied" and deadline.left() > 30:
            result["patched"] = run_phase(
                "patched", python, flags, run_env, port, out, work, deadline, notes
            )
        else:
            notes.append("patched run skipped: the patch did not apply or no time was left")
    except Exception as err:  # noqa: BLE001 - the caller gets what was seen
        notes.append(f"scenario: {type(err).__name__}: {err}")
    finally:
        try:
            reverted = patch_cli(
                python, "revert", Path(site), launch_env(env, Path(site)), REVERT_RESERVE_S
            )
            result["patch_after"] = _verdict(reverted)
        except Exception as err:  # noqa: BLE001
            notes.append(f"revert: {type(err).__name__}: {err}")
    return result


def _earlier(a: Deadline, b: Deadline) -> Deadline:
    return a if a.end < b.end else b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the engine's interpreter")
    parser.add_argument("--site", required=True, type=Path, help="sglang's site-packages")
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--port", type=int, default=31000)
    parser.add_argument("--budget", type=float, default=420)
    parser.add_argument(
        "--nsa-backends",
        default=",".join(NSA_BACKENDS),
        help="PREFILL,DECODE NSA backends (default %(default)s; trtllm,trtllm: the guarded case)",
    )
    args = parser.parse_args(argv)
    backends = tuple(args.nsa_backends.split(","))
    if len(backends) != 2 or not all(backends):
        parser.error(f"--nsa-backends takes PREFILL,DECODE, not {args.nsa_backends!r}")
    env = {**os.environ, **NVLS_OFF}
    result = run(
        args.python, args.site, args.model_dir, args.out, env, args.port, args.budget, backends
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
