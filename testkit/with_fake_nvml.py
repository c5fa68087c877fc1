"""Run Python with testkit's fake `pynvml` in place of the real one (no GPU needed).

    python -m testkit.with_fake_nvml GPUS SCRIPT [ARGS...]
    python -m testkit.with_fake_nvml GPUS -m MODULE [ARGS...]
    python -m testkit.with_fake_nvml GPUS -c CODE [ARGS...]

How the tests run the GPU benchmark scripts (and `glm5svc` itself) on a machine without a
GPU: the code path is the real one, the figures are the fake's and mean nothing.
"""

from __future__ import annotations

import runpy
import sys

from testkit import fake_pynvml

USAGE = "usage: python -m testkit.with_fake_nvml GPUS (SCRIPT | -m MODULE | -c CODE) [ARGS...]"


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit() or argv[1] in ("-m", "-c") and len(argv) < 3:
        sys.exit(USAGE)
    sys.modules["pynvml"] = fake_pynvml.make_module(int(argv[0]))
    if argv[1] == "-m":
        sys.argv = [argv[2], *argv[3:]]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    elif argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv[1:]
        runpy.run_path(argv[1], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
