"""Wall-time overhead of `glm5svc bench` over bare `sglang.bench_serving`, one level.

Both run the same bench_serving (sglang 0.5.9, testkit's bench venv) with the same
arguments against the same test engine, alternately, several times; the figure is the
difference of the medians over the bare median. Goal: <= 3 %.

    .venv/bin/python bench/overhead.py [--rounds 5] [--concurrency 32] [--prompts 256]
    .venv/bin/python bench/overhead.py --short     (one small round: CI checks it still runs)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from glm5svc.bench.plan import BenchPlan  # noqa: E402
from glm5svc.bench.runner import bench_serving_command, bench_serving_env  # noqa: E402
from testkit.bench_venv import build_bench_serving_venv, make_tokenizer  # noqa: E402
from testkit.engine import start_engine  # noqa: E402


def timed(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument(
        "--short", action="store_true", help="1 round of 16 prompts at concurrency 4, 32/16 tokens"
    )
    args = parser.parse_args(argv)
    if args.short:
        args.rounds, args.concurrency, args.prompts = 1, 4, 16
        args.input_len, args.output_len = 32, 16
    python = str(build_bench_serving_venv())
    work = Path(tempfile.mkdtemp(prefix="glm5-overhead-"))
    tokenizer = make_tokenizer(python, work / "tokenizer")
    engine = start_engine(work / "engine.log")
    try:
        plan = BenchPlan(
            base_url=engine.base_url, python=python, tokenizer=str(tokenizer), model="glm-5",
            ladder=(args.concurrency,), input_len=args.input_len, output_len=args.output_len,
            num_prompts=args.prompts, warmup_requests=4,
        )  # fmt: skip
        bare = bench_serving_command(plan, args.concurrency, args.prompts, work / "bare.jsonl")
        ours = [
            sys.executable, "-m", "glm5svc", "bench",
            "--ladder", str(args.concurrency), "--num-prompts", str(args.prompts),
            "--input-len", str(args.input_len), "--output-len", str(args.output_len),
            "--warmup-requests", "4", "--base-url", engine.base_url, "--python", python,
            "--tokenizer", str(tokenizer), "--model", "glm-5", "--baseline", "none",
            "--results-dir", str(work / "results"), "--json",
        ]  # fmt: skip
        # One bench_serving run on each side: the single wave (benchmark.steady: false), so
        # the difference is glm5svc's own cost, not the steady method's extra runs.
        wave = work / "wave.yaml"
        wave.write_text("benchmark: {steady: false}\n")
        env = bench_serving_env(plan)
        if not args.short:
            timed(bare, env)  # warm caches once
        bare_s, ours_s = [], []
        for _ in range(args.rounds):
            bare_s.append(timed(bare, env))
            ours_s.append(timed(ours, {**env, "GLM5SVC_CONFIG": str(wave)}))
    finally:
        engine.stop()
        shutil.rmtree(work, ignore_errors=True)
    b, o = statistics.median(bare_s), statistics.median(ours_s)
    print(f"level: concurrency {args.concurrency}, {args.prompts} prompts, "
          f"{args.input_len}/{args.output_len} tokens, {args.rounds} rounds each")  # fmt: skip
    print(f"bare bench_serving wall s: {' '.join(f'{x:.2f}' for x in bare_s)}  median {b:.2f}")
    print(f"glm5svc bench      wall s: {' '.join(f'{x:.2f}' for x in ours_s)}  median {o:.2f}")
    print(f"overhead: {o - b:+.2f} s = {(o - b) / b * 100:+.1f} % (goal <= 3 %)")


if __name__ == "__main__":
    main()
