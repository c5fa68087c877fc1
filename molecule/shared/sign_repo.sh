#!/bin/sh
# Indexes a flat apt repository of stand-in .deb files and signs it with a fresh key
# (Packages, Release, InRelease, Release.gpg, stand-in-key.asc). Tests only.
# Usage: sign_repo.sh <repo dir>
set -eu
out=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -f "$out/Packages" "$out/Packages.gz" "$out/Release" "$out/InRelease" "$out/Release.gpg" \
  "$out/stand-in-key.asc"
(cd "$out" && dpkg-scanpackages --multiversion . /dev/null > Packages 2>/dev/null && gzip -9kn Packages)
{
  echo "Origin: glm5svc stand-in"
  echo "Label: STAND-IN NVIDIA CUDA repository (tests only)"
  echo "Architectures: all amd64"
  echo "Date: $(date -Ru)"
  echo "SHA256:"
  for f in Packages Packages.gz; do
    echo " $(sha256sum "$out/$f" | cut -d' ' -f1) $(stat -c %s "$out/$f") $f"
  done
} > "$out/Release"

export GNUPGHOME="$work/gnupg"
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "glm5svc stand-in repo <tests@invalid>" ed25519 sign never
gpg --batch --quiet --armor --export > "$out/stand-in-key.asc"
gpg --batch --quiet --yes --clearsign -o "$out/InRelease" "$out/Release"
gpg --batch --quiet --yes -abs -o "$out/Release.gpg" "$out/Release"
gpgconf --kill all 2>/dev/null || true
