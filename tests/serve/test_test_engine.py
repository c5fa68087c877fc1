"""The test engine speaks SGLang's /generate stream the way sglang.bench_serving reads it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import aiohttp
import pytest

from testkit.engine import TEST_ENGINE, free_port


@pytest.fixture
def engine():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TEST_ENGINE),
            "--port",
            str(port),
            "--model-path",
            "/models/x",
            "--tp-size",
            "8",
            "--max-running-requests",
            "64",
            "--unknown-flag",
            "1",
            "--test-mode",
            "load=0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            import urllib.request

            with urllib.request.urlopen(base + "/health", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    yield base
    proc.terminate()
    proc.wait(10)


async def bench_style_request(session, base, output_len):
    """What bench_serving's async_request_sglang_generate does with the stream."""
    payload = {
        "text": "hello " * 50,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True},
        "stream": True,
        "return_logprob": False,
        "logprob_start_len": -1,
    }
    text, completion_tokens, done = "", 0, False
    async with session.post(base + "/generate", json=payload) as response:
        assert response.status == 200
        async for chunk_bytes in response.content:
            chunk_bytes = chunk_bytes.strip()
            if not chunk_bytes:
                continue
            chunk = chunk_bytes.decode().removeprefix("data: ")
            if chunk == "[DONE]":
                done = True
                continue
            data = json.loads(chunk)
            if data.get("text"):
                text = data["text"]
                completion_tokens = data["meta_info"]["completion_tokens"]
    return text, completion_tokens, done


def test_streams_like_sglang_for_many_concurrent_requests(engine):
    async def run():
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            results = await asyncio.gather(
                *[bench_style_request(session, engine, 16) for _ in range(200)]
            )
            async with session.get(engine + "/metrics") as response:
                metrics = await response.text()
            async with session.get(engine + "/v1/models") as response:
                models = await response.json()
            async with session.get(engine + "/get_server_info") as response:
                info = await response.json()
        return results, metrics, models, info

    results, metrics, models, info = asyncio.run(run())
    assert all(done and tokens == 16 and text for text, tokens, done in results)
    sample = 'sglang:generation_tokens_total{engine_type="unified",model_name="/models/x"} '
    assert sample in metrics
    generated = float(metrics.split(sample)[1].split()[0])
    assert generated >= 200 * 16
    assert models["data"][0]["id"] == "/models/x"
    assert info["tp_size"] == 8 and info["max_running_requests"] == 64
