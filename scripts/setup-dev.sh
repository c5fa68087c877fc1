#!/usr/bin/env bash
# Installs what glm5svc's tests need on a fresh Debian 12/13 machine (run as root):
# Debian packages, then a venv at .venv with glm5svc and its test tools.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  libsystemd-dev pkg-config gcc python3-dev python3-venv  # systemd-python builds from source
  systemd                                                  # systemd-analyze verify
  lxc systemd-container mmdebstrap zstd                    # real Debian targets for Molecule
  gnupg apt-utils dpkg-dev                                 # the signed stand-in apt repository
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-dev: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# The editable install follows code changes by itself; pyproject.toml decides what else the
# venv holds, so pip runs again only when it changed (or the venv is new).
stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat .venv/.setup-dev-pyproject 2>/dev/null)" != "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip
  # setuptools warns on every editable install ("be careful with folders in your working
  # directory ..."): known here, and noise in a run that went well.
  PYTHONWARNINGS=ignore::UserWarning \
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,provision]'
  echo "$stamp" > .venv/.setup-dev-pyproject
fi
