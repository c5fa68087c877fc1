#!/bin/sh
# Indexes flat apt repositories of stand-in .deb files and signs them all with one fresh key
# (Packages, Release, InRelease, Release.gpg in each; the key as stand-in-key.asc and its
# fingerprint as stand-in-key.fpr in the key dir). Tests only.
# A directory with dists/<suite>/<component>/ is indexed as an archive with components
# (pool/<component>/*.deb), the way Debian's is laid out.
# Usage: sign_repo.sh <key dir> <repo dir>...   (writes <key dir>/stand-in-key.asc and .fpr)
set -eu
keydir=$1; shift
work=$(mktemp -d)
trap 'gpgconf --kill all 2>/dev/null || true; rm -rf "$work"' EXIT
export GNUPGHOME="$work/gnupg"
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "glm5svc stand-in repo <tests@invalid>" ed25519 sign never
gpg --batch --quiet --armor --export > "$keydir/stand-in-key.asc"
gpg --batch --with-colons --list-keys | awk -F: '$1 == "fpr" { print $10; exit }' > "$keydir/stand-in-key.fpr"
release() {  # release <dir> <label> <index files...>: Release with SHA256 lines, signed
  dir=$1 label=$2; shift 2
  {
    echo "Origin: glm5svc stand-in"
    echo "Label: $label"
    [ -n "${SUITE:-}" ] && echo "Suite: $SUITE" && echo "Codename: $SUITE" && \
      echo "Components: $COMPONENTS"
    echo "Architectures: all amd64"
    echo "Date: $(date -Ru)"
    echo "SHA256:"
    for f in "$@"; do
      echo " $(sha256sum "$dir/$f" | cut -d' ' -f1) $(stat -c %s "$dir/$f") $f"
    done
  } > "$dir/Release"
  gpg --batch --quiet --yes --clearsign -o "$dir/InRelease" "$dir/Release"
  gpg --batch --quiet --yes -abs -o "$dir/Release.gpg" "$dir/Release"
}

for out in "$@"; do
  if [ -d "$out/dists" ]; then
    for suite_dir in "$out"/dists/*; do
      files=""
      # The components are the suite's folders (main contrib for Debian's, pve-no-subscription ...).
      comps=$(cd "$suite_dir" && for c in */; do printf '%s ' "${c%/}"; done)
      for comp in $comps; do
        # apt also asks for the machine's architecture: an empty index says "none here".
        mkdir -p "$suite_dir/$comp/binary-amd64" "$suite_dir/$comp/binary-all"
        : > "$suite_dir/$comp/binary-amd64/Packages"
        gzip -9kfn "$suite_dir/$comp/binary-amd64/Packages"
        files="$files $comp/binary-amd64/Packages $comp/binary-amd64/Packages.gz"
        index=$comp/binary-all/Packages
        mkdir -p "$out/pool/$comp"
        (cd "$out" && dpkg-scanpackages --multiversion "pool/$comp" /dev/null > "$suite_dir/$index" 2>/dev/null)
        gzip -9kfn "$suite_dir/$index"
        files="$files $index $index.gz"
      done
      # shellcheck disable=SC2086
      SUITE=$(basename "$suite_dir") COMPONENTS=${comps% } release "$suite_dir" "STAND-IN Debian archive (tests only)" $files
    done
    continue
  fi
  rm -f "$out/Packages" "$out/Packages.gz" "$out/Release" "$out/InRelease" "$out/Release.gpg"
  (cd "$out" && dpkg-scanpackages --multiversion . /dev/null > Packages 2>/dev/null && gzip -9kn Packages)
  release "$out" "STAND-IN NVIDIA CUDA repository (tests only)" Packages Packages.gz
done
