#!/bin/sh
# Builds signed, flat apt repositories of STAND-IN packages laid out like NVIDIA's CUDA
# repositories: <out>/debian12/x86_64/ carries driver branches 580 and 590,
# <out>/debian13/x86_64/ only 590 (NVIDIA's debian13 repository has no 580), each with the
# stand-in key under NVIDIA's published key file name (3bf863cc.pub, 8793F200.pub). The
# packages' relationships follow NVIDIA's Debian packaging (docs/external-names.md): the
# persistence daemon is only recommended, libcuda1 and nvidia-driver-cuda depend on
# nvidia-support (Debian contrib, not in NVIDIA's repository). Nothing in them is NVIDIA
# software: "nvidia-smi" is a shell script that prints fixed output.
# Usage: build_repo.sh <output dir>   (also writes <out>/stand-in-key.asc and .fpr)
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"; mkdir -p "$out/debian12/x86_64" "$out/debian13/x86_64"

# deb <dir> <name> <version> <depends> <recommends> [<src file> <dest path>]...
deb() {
  dir=$1 name=$2 version=$3 depends=$4 recommends=$5; shift 5
  root=$work/$name-$version
  rm -rf "$root"; mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
  echo "STAND-IN for $name $version, built by glm5svc molecule tests" > "$root/usr/share/doc/$name/STAND-IN"
  while [ $# -ge 2 ]; do
    mkdir -p "$root$(dirname "$2")"
    sed "s/@VERSION@/${version%-*}/g" "$here/$1" > "$root$2"
    case "$2" in */bin/*) chmod 0755 "$root$2" ;; *) chmod 0644 "$root$2" ;; esac
    shift 2
  done
  {
    echo "Package: $name"; echo "Version: $version"; echo "Architecture: all"
    echo "Maintainer: glm5svc tests <tests@invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    [ -n "$recommends" ] && echo "Recommends: $recommends"
    echo "Description: STAND-IN for $name (glm5svc Molecule tests only)"
  } > "$root/DEBIAN/control"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$dir/${name}_${version}_all.deb" >/dev/null
}

# driver <dir> <version>: one branch of the compute-only driver with open kernel modules.
driver() {
  d=$1 v=$2
  deb "$d" libnvidia-ml1 "$v" "" ""
  deb "$d" nvidia-smi "$v" "libnvidia-ml1 (= $v)" "nvidia-kernel-open-dkms" nvidia-smi.sh /usr/bin/nvidia-smi
  deb "$d" libcuda1 "$v" "nvidia-support" "nvidia-kernel-open-dkms, nvidia-smi, nvidia-persistenced"
  deb "$d" nvidia-modprobe "$v" "" "" nvidia-modprobe.sh /usr/bin/nvidia-modprobe
  deb "$d" nvidia-persistenced "$v" "" "" nvidia-persistenced.sh /usr/bin/nvidia-persistenced \
    nvidia-persistenced.service /usr/lib/systemd/system/nvidia-persistenced.service
  deb "$d" nvidia-kernel-support "$v" "nvidia-modprobe" ""
  deb "$d" nvidia-kernel-open-dkms "$v" "nvidia-kernel-support (= $v)" "libcuda1 (>= ${v%-*})"
  deb "$d" nvidia-driver-cuda "$v" "nvidia-smi (= $v), libcuda1 (= $v), nvidia-support" \
    "nvidia-persistenced, nvidia-kernel-open-dkms (= $v)"
}

for v in 580.95.05-1 590.44.01-1; do driver "$out/debian12/x86_64" "$v"; done
driver "$out/debian13/x86_64" 590.44.01-1
for d in "$out/debian12/x86_64" "$out/debian13/x86_64"; do
  deb "$d" nvidia-driver-pinning-590 1.0-1 "" "" pinning-590.pref /etc/apt/preferences.d/nvidia-driver-pinning-590
done
deb "$out/debian12/x86_64" nvidia-driver-pinning-580 1.0-1 "" "" \
  pinning-580.pref /etc/apt/preferences.d/nvidia-driver-pinning-580


# Debian's side, as a stand-in archive with components (suites bookworm and trixie): dkms in
# main, nvidia-support in contrib; the targets list only main, so the role must add contrib.
# Proxmox's kernel headers (the default series and this machine's running kernel) in main too.
archive=$out/debian-archive
for suite in bookworm trixie; do
  for comp in main contrib; do mkdir -p "$archive/pool/$comp" "$archive/dists/$suite/$comp/binary-all"; done
done
deb "$archive/pool/main" dkms 3.0.10-stand-in "" ""
deb "$archive/pool/main" proxmox-default-headers 1.0-stand-in "" ""
deb "$archive/pool/main" "proxmox-headers-$(uname -r)" 1.0-stand-in "" ""
deb "$archive/pool/contrib" nvidia-support 20240109+1-stand-in "" ""

"$here/../../shared/sign_repo.sh" "$out" "$out/debian12/x86_64" "$out/debian13/x86_64" "$archive"
cp "$out/stand-in-key.asc" "$out/debian12/x86_64/3bf863cc.pub"
cp "$out/stand-in-key.asc" "$out/debian13/x86_64/8793F200.pub"
