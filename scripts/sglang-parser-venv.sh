#!/usr/bin/env bash
# Builds a CPU-only venv in which sglang's real launch_server argument parser imports,
# so tests can parse the launch plan with it (no GPU, no CUDA wheels).
# Usage: scripts/sglang-parser-venv.sh DEST SGLANG_VERSION
#
# What every version shares (CPU torch and the modules the parser imports) is installed
# once into a base venv beside DEST (sglang-parser-base); DEST holds only sglang itself
# (--no-deps) and the transformers/tokenizers its own wheel pins, and sees the base
# through a .pth file. A second version therefore costs one small install, not a venv.
# Facts (docs/targets.md, "Checking the plan against sglang's parser"): sglang's parser
# imports on CPU torch with the version's own transformers pin; 0.5.11 breaks with a
# newer transformers ("'qwen3_asr' is already used by a Transformers config").
set -euo pipefail
dest=${1:?destination directory}
version=${2:?sglang version}
[ -f "$dest/.complete-$version" ] && exit 0
base="$(dirname "$dest")/sglang-parser-base"
pip_flags=(-q --disable-pip-version-check)
site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

if [ ! -f "$base/.complete" ]; then
  rm -rf "$base"
  python3 -m venv "$base"
  # torch 2.13.0 CPU lies on this machine's disk; a plain `torch` would pull a CUDA build.
  "$base/bin/python" -m pip install "${pip_flags[@]}" torch==2.13.0
  "$base/bin/python" -m pip install "${pip_flags[@]}" numpy orjson psutil pybase64 requests \
    packaging pillow starlette msgspec pydantic pyzmq tqdm IPython aiohttp fastapi uvloop \
    setproctitle triton openai partial_json_parser dill sentencepiece pyyaml einops \
    huggingface_hub safetensors regex
  # The PyPI torchvision is a CUDA build that fails beside CPU torch; sglang only needs
  # the import to succeed for its parser, so a stand-in module is enough.
  cp -r "$(dirname "$0")/../testkit/torchvision_stand_in" "$(site_of "$base")/torchvision"
  touch "$base/.complete"
fi

rm -rf "$dest"
python3 -m venv "$dest"
site=$(site_of "$dest")
echo "import site; site.addsitedir('$(site_of "$base")')" > "$site/sglang-parser-base.pth"
"$dest/bin/python" -m pip install "${pip_flags[@]}" --no-deps "sglang==$version"
# The transformers pin of this sglang's own wheel (Requires-Dist transformers==X).
transformers_pin=$("$dest/bin/python" - <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement
pins = [r for r in map(Requirement, md.requires("sglang") or []) if r.name == "transformers"]
print(next(str(r.specifier) for r in pins if r.marker is None or r.marker.evaluate({"extra": ""})))
EOF
)
"$dest/bin/python" -m pip install "${pip_flags[@]}" "transformers$transformers_pin"
"$dest/bin/python" -c 'from sglang.srt.server_args import ServerArgs'
touch "$dest/.complete-$version"
