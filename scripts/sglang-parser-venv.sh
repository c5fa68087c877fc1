#!/usr/bin/env bash
# Builds a CPU-only venv in which sglang's real launch_server argument parser imports,
# so tests can parse the launch plan with it (no GPU, no CUDA wheels).
# Usage: scripts/sglang-parser-venv.sh DEST SGLANG_VERSION
# Facts: shared/reference/sglang-versions.md ("The parser of 0.5.9/0.5.10.post1 imports...").
set -euo pipefail
dest=${1:?destination directory}
version=${2:?sglang version}
[ -f "$dest/.complete-$version" ] && exit 0
rm -rf "$dest"
python3 -m venv "$dest"
pip="$dest/bin/python -m pip install -q --disable-pip-version-check"
# torch 2.13.0 CPU lies on this machine's disk; a plain `torch` would pull a CUDA build.
$pip torch==2.13.0
$pip transformers==5.3.0 numpy orjson psutil pybase64 requests packaging pillow starlette \
  msgspec pydantic pyzmq tqdm IPython aiohttp fastapi uvloop setproctitle triton openai \
  partial_json_parser dill sentencepiece pyyaml
$pip --no-deps "sglang==$version"
# The PyPI torchvision is a CUDA build that fails beside CPU torch; sglang only needs
# the import to succeed for its parser, so a stand-in module is enough.
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -r "$(dirname "$0")/../testkit/torchvision_stand_in" "$site/torchvision"
"$dest/bin/python" -c 'from sglang.srt.server_args import ServerArgs'
touch "$dest/.complete-$version"
