#!/usr/bin/env bash
# Installs what glm5svc's tests need on a fresh Debian 12/13 machine (run as root):
# Debian packages, then a venv at .venv with glm5svc and its test tools.
#   scripts/setup-dev.sh            everything the tests, the lab and provisioning need (root)
#   scripts/setup-dev.sh --minimal  no root, no Debian packages: a .venv with glm5svc and its
#                                   dependencies except systemd-python (it compiles against
#                                   libsystemd's headers; outside systemd glm5svc logs to
#                                   stderr and sends no notify messages). Enough for the
#                                   commands that print or check (command --explain, config,
#                                   status, bench against a running server).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") ;;
  --minimal)
    if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
      if python3 -c 'import ensurepip' 2>/dev/null; then
        python3 -m venv .venv
      else
        # Debian without python3-venv (root installs it) has no ensurepip: pip's wheel from
        # PyPI installs pip into a venv made without it.
        python3 -m venv --without-pip .venv
        python3 scripts/bootstrap_pip.py .venv/bin/python
      fi
    fi
    stamp="minimal $(sha256sum pyproject.toml | cut -d' ' -f1)"
    # A full set-up holds all of it already; a minimal one is redone when pyproject.toml changes.
    case "$(cat .venv/.setup-dev-pyproject 2>/dev/null)" in
      "$stamp" | "$(sha256sum pyproject.toml | cut -d' ' -f1)") exit 0 ;;
    esac
    mapfile -t deps < <(python3 -c '
import re, tomllib
for dep in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    if re.match(r"systemd-python\b", dep) is None:
        print(dep)')
    .venv/bin/python -m pip install -q --disable-pip-version-check "${deps[@]}"
    PYTHONWARNINGS=ignore::UserWarning \
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
    echo "$stamp" > .venv/.setup-dev-pyproject
    exit 0 ;;
  *) echo "usage: scripts/setup-dev.sh [--minimal]" >&2; exit 2 ;;
esac

APT_PACKAGES=(
  libsystemd-dev pkg-config gcc python3-dev python3-venv  # systemd-python builds from source
  systemd                                                  # systemd-analyze verify
  lxc systemd-container mmdebstrap zstd                    # real Debian targets for Molecule
  gnupg apt-utils dpkg-dev                                 # the signed stand-in apt repository
  prometheus                                               # promtool and a real Prometheus (tests/monitoring)
  prometheus-alertmanager                                  # amtool and a real Alertmanager (tests/monitoring)
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-dev: missing Debian packages: ${missing[*]} (run as root or install them;" \
      "without root, scripts/setup-dev.sh --minimal sets up what glm5svc's commands need)" >&2
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
