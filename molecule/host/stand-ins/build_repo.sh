#!/bin/sh
# Builds signed, flat apt repositories of STAND-IN packages laid out like NVIDIA's CUDA
# repositories today: <out>/debian12/x86_64/ carries driver branches 580 (580.95.05,
# 580.105.08) and 590 (590.44.01); <out>/debian13/x86_64/ carries 590 (590.44.01, 590.48.01),
# 595 (595.71.05) and 610 (610.22.02, a made-up number) and no 580. Each repository has the
# stand-in key under NVIDIA's published key file name (3bf863cc.pub, 8793F200.pub). The
# packages' relationships follow NVIDIA's packaging (docs/external-names.md): the DKMS package
# depends on firmware-nvidia-gsp at its version; the persistence daemon is only recommended;
# libcuda1 and nvidia-driver-cuda depend on nvidia-support (Debian contrib). The pin packages:
# nvidia-driver-pinning-<branch> (Pin: version <branch>.*) and nvidia-driver-pinning-<version>
# (Pin: version <version>-*) all ship /etc/apt/preferences.d/nvidia-driver-pin, Provide,
# Conflict with and Replace nvidia-driver-pinning: one at a time, switching replaces.
# Also a stand-in of Proxmox's no-subscription archive (<out>/proxmox/{pve,ceph-squid}) and
# Debian's (<out>/debian-archive). Nothing in them is NVIDIA or Proxmox software: "nvidia-smi"
# is a shell script. Usage: build_repo.sh <output dir>   (also writes <out>/stand-in-key.asc and .fpr)
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"; mkdir -p "$out/debian12/x86_64" "$out/debian13/x86_64"

# deb <dir> <name> <version> <depends> <recommends> [<src file> <dest path>]...
# Extra control lines come from $CONTROL (Provides, Conflicts, Replaces).
deb() {
  dir=$1 name=$2 version=$3 depends=$4 recommends=$5; shift 5
  root=$work/$name-$version
  rm -rf "$root"; mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
  echo "STAND-IN for $name $version, built by glm5svc molecule tests" > "$root/usr/share/doc/$name/STAND-IN"
  while [ $# -ge 2 ]; do
    mkdir -p "$root$(dirname "$2")"
    case "$1" in /*) src=$1 ;; *) src=$here/$1 ;; esac
    sed "s/@VERSION@/${version%-*}/g" "$src" > "$root$2"
    case "$2" in */bin/* | /DEBIAN/*) chmod 0755 "$root$2" ;; *) chmod 0644 "$root$2" ;; esac
    shift 2
  done
  {
    echo "Package: $name"; echo "Version: $version"; echo "Architecture: all"
    echo "Maintainer: glm5svc tests <tests@invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    [ -n "$recommends" ] && echo "Recommends: $recommends"
    [ -n "${CONTROL:-}" ] && printf '%s\n' "$CONTROL"
    echo "Description: STAND-IN for $name (glm5svc Molecule tests only)"
  } > "$root/DEBIAN/control"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$dir/${name}_${version}_all.deb" >/dev/null
}

# driver <dir> <version>: one release of the compute-only driver with open kernel modules.
driver() {
  d=$1 v=$2
  deb "$d" libnvidia-ml1 "$v" "" ""
  deb "$d" nvidia-smi "$v" "libnvidia-ml1 (= $v)" "nvidia-kernel-open-dkms" nvidia-smi.sh /usr/bin/nvidia-smi
  deb "$d" libcuda1 "$v" "nvidia-support" "nvidia-kernel-open-dkms, nvidia-smi, nvidia-persistenced"
  deb "$d" nvidia-modprobe "$v" "" "" nvidia-modprobe.sh /usr/bin/nvidia-modprobe
  deb "$d" nvidia-persistenced "$v" "" "" nvidia-persistenced.sh /usr/bin/nvidia-persistenced \
    nvidia-persistenced.service /usr/lib/systemd/system/nvidia-persistenced.service
  deb "$d" nvidia-kernel-support "$v" "nvidia-modprobe" ""
  deb "$d" firmware-nvidia-gsp "$v" "" ""
  deb "$d" nvidia-kernel-open-dkms "$v" "nvidia-kernel-support (= $v), firmware-nvidia-gsp (= $v)" \
    "libcuda1 (>= ${v%-*})" dkms-postinst.sh /DEBIAN/postinst
  deb "$d" nvidia-driver-cuda "$v" "nvidia-smi (= $v), libcuda1 (= $v), nvidia-support" \
    "nvidia-persistenced, nvidia-kernel-open-dkms (= $v)"
}

# pin <dir> <branch or version> <Pin: version pattern> <what>: one of NVIDIA's pin packages.
pin() {
  printf '# STAND-IN for NVIDIA nvidia-driver-pinning-%s (glm5svc Molecule tests only).\n' "$2" > "$work/pin"
  printf 'Package: nvidia-driver-cuda nvidia-kernel-open-dkms nvidia-kernel-support nvidia-smi' >> "$work/pin"
  printf ' nvidia-modprobe nvidia-persistenced libcuda1 libnvidia-ml1 firmware-nvidia-gsp\n' >> "$work/pin"
  printf 'Pin: version %s\nPin-Priority: 1000\n' "$3" >> "$work/pin"
  CONTROL="Provides: nvidia-driver-pinning
Conflicts: nvidia-driver-pinning
Replaces: nvidia-driver-pinning" deb "$1" "nvidia-driver-pinning-$2" "$4" "" "" \
    "$work/pin" /etc/apt/preferences.d/nvidia-driver-pin
}

for release in 580.95.05 580.105.08 590.44.01; do
  driver "$out/debian12/x86_64" "$release-1"; pin "$out/debian12/x86_64" "$release" "$release-*" "$release-1"
done
for release in 590.44.01 590.48.01 595.71.05 610.22.02; do
  driver "$out/debian13/x86_64" "$release-1"; pin "$out/debian13/x86_64" "$release" "$release-*" "$release-1"
done
for b in 580 590; do pin "$out/debian12/x86_64" "$b" "$b.*" "$b-5"; done
for b in 590 595 610; do pin "$out/debian13/x86_64" "$b" "$b.*" "$b-1"; done

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

# Proxmox's no-subscription repositories (what the enterprise ones are switched to), one
# stand-in package each so that a test sees apt read them.
proxmox=$out/proxmox
mkdir -p "$proxmox/pve/pool/pve-no-subscription" "$proxmox/ceph-squid/pool/no-subscription"
for suite in bookworm trixie; do
  mkdir -p "$proxmox/pve/dists/$suite/pve-no-subscription/binary-all"
done
mkdir -p "$proxmox/ceph-squid/dists/trixie/no-subscription/binary-all"
deb "$proxmox/pve/pool/pve-no-subscription" pve-no-subscription-stand-in 1.0 "" ""
deb "$proxmox/ceph-squid/pool/no-subscription" ceph-no-subscription-stand-in 1.0 "" ""

"$here/../../shared/sign_repo.sh" "$out" "$out/debian12/x86_64" "$out/debian13/x86_64" "$archive" \
  "$proxmox/pve" "$proxmox/ceph-squid"
cp "$out/stand-in-key.asc" "$out/debian12/x86_64/3bf863cc.pub"
cp "$out/stand-in-key.asc" "$out/debian13/x86_64/8793F200.pub"
GNUPGHOME=$work gpg --batch --quiet --yes --dearmor -o "$out/proxmox-archive-keyring.gpg" "$out/stand-in-key.asc"
