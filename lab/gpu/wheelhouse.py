"""Builds, on this (CPU) machine, the one archive of Python packages the GPU machine needs.

The GPU machine (docs/gpu-lab.md) has Python 3.12 with torch 2.11.0+cu130, triton,
numpy, pyyaml, nvidia-ml-py and the CUDA 13 libraries, but no sglang, and it reaches no
package index. sglang 0.5.11 pins torch==2.11.0, so torch stays; what travels is the
import closure of the server, bench_serving and glm5svc (WHEELS below), installed here
into a plain directory with `pip install --target` and packed as one .tar.xz (solid
compression: 41 MiB for 275 MiB of files, under the 64 MiB a transfer may carry).

The sglang kernel wheel is 326 MB, 1 GB of it FlashAttention 3 (`flash_ops.abi3.so`);
the server runs without it with `--attention-backend triton`. Dropped: FA3, the SM100
kernels, mscclpp and the static libraries. Kept: the SM90 kernels, FlashMLA and
DeepGEMM with its headers (a DSA model such as GLM-5 needs them).
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

# name==version for the GPU machine's Python 3.12; the unversioned ones are taken at the
# newest release that supports 3.12 (they are only imported, never pinned by sglang).
WHEELS = [
    "sglang==0.5.11",
    "sglang-kernel==0.4.2",
    "flashinfer-python==0.6.8.post1",
    # sglang 0.5.11 pins transformers 5.6.0; the machine's 5.17 refuses its configs
    # ("'qwen3_asr' is already used by a Transformers config"); 5.6.0 refuses
    # tokenizers 0.23, so tokenizers travels too.
    "transformers==5.6.0",
    "tokenizers==0.22.2",
    "apache-tvm-ffi==0.1.15.post2",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "soundfile==0.13.1",
    "openai==2.6.1",
    "pyzmq==27.3.0",
    "ipython==9.18.1",
    "datasets==5.2.0",
    # FlashInfer compiles its attention kernels at first use (JIT) by running `ninja`;
    # the wheel's binary lands in the site's bin/, which the NSA scenario puts on PATH.
    "ninja==1.13.2",
    # `glm5svc tune`'s search (optuna, its study in SQLite through SQLAlchemy). numpy,
    # pyyaml, tqdm, markupsafe, packaging and matplotlib (the plots) are on the machine.
    # SQLAlchemy 2.1 needs greenlet only for asyncio; alembic wants Mako.
    "optuna",
    "sqlalchemy",
    "alembic",
    "mako",
    "colorlog",
    *"""rpds-py jiter compressed-tensors msgspec cffi fastapi multiprocess orjson gguf dill
    uvicorn traitlets pybase64 jsonschema starlette pycparser opentelemetry-api loguru
    setproctitle referencing python-multipart jsonschema-specifications distro
    typing-inspection sniffio partial-json-parser annotated-types""".split(),
]

KERNEL_WHEEL_DROP = [
    "sgl_kernel/flash_ops.abi3.so",
    "sgl_kernel/sm100/",
    "lib/",
    "lib64/",
    "include/",
    "_mscclpp",
]

PLATFORM_ARGS = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--abi",
    "cp312",
    *[
        arg
        for tag in (
            "manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 "
            "manylinux_2_26_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 "
            "manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 any"
        ).split()
        for arg in ("--platform", tag)
    ],
]

TRANSFER_LIMIT_BYTES = 64 * 1024 * 1024


def pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True
    )


def trim_kernel_wheel(source: Path, dest: Path) -> None:
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            name = item.filename
            dropped = any(name.startswith(p) for p in KERNEL_WHEEL_DROP) or name.endswith(".a")
            if not dropped:
                zout.writestr(item, zin.read(name))


def build(work: Path, archive: Path) -> Path:
    downloads = work / "downloads"
    wheels = work / "wheels"
    site = work / "site"
    downloads.mkdir(parents=True, exist_ok=True)
    pip("download", "--no-deps", *PLATFORM_ARGS, "-d", str(downloads), *WHEELS)
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    for wheel in downloads.glob("*.whl"):
        if wheel.name.startswith("sglang_kernel-"):
            trim_kernel_wheel(wheel, wheels / wheel.name)
        else:
            shutil.copy2(wheel, wheels / wheel.name)
    shutil.rmtree(site, ignore_errors=True)
    pip(
        "install",
        "--no-index",
        "--no-deps",
        "--no-compile",
        *PLATFORM_ARGS,
        "--target",
        str(site),
        *map(str, sorted(wheels.glob("*.whl"))),
    )
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with lzma.open(partial, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        tar.add(site, arcname=".")
    partial.replace(archive)
    size = archive.stat().st_size
    if size > TRANSFER_LIMIT_BYTES - 4 * 1024 * 1024:
        raise SystemExit(
            f"{archive} is {size / 2**20:.1f} MiB: too close to the 64 MiB a transfer carries"
        )
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work", type=Path, default=Path(".cache/gpu-lab"), help="download/build folder"
    )
    parser.add_argument("--archive", type=Path, default=Path(".gpu-lab/site.tar.xz"))
    args = parser.parse_args()
    archive = build(args.work, args.archive)
    print(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB ({len(WHEELS)} distributions)")


if __name__ == "__main__":
    main()
