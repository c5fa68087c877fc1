#!/bin/sh
# Builds a signed, flat apt repository of STAND-IN packages that carry NVIDIA's
# package names and versions, for the Molecule tests of glm5_host_nvidia_driver.
# Nothing in it is NVIDIA software: the "nvidia-smi" is a shell script that
# prints fixed output. Usage: build_repo.sh <output dir>
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"; mkdir -p "$out"

# deb <name> <version> <depends> [<src file> <dest path>]...
deb() {
  name=$1 version=$2 depends=$3; shift 3
  root=$work/$name-$version
  mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
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
    echo "Description: STAND-IN for $name (glm5svc Molecule tests only)"
  } > "$root/DEBIAN/control"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/${name}_${version}_all.deb" >/dev/null
}

for v in 580.95.05-1 590.44.01-1; do
  deb nvidia-smi "$v" "" nvidia-smi.sh /usr/bin/nvidia-smi
  deb nvidia-modprobe "$v" "" nvidia-modprobe.sh /usr/bin/nvidia-modprobe
  deb nvidia-persistenced "$v" "" nvidia-persistenced.sh /usr/bin/nvidia-persistenced \
    nvidia-persistenced.service /usr/lib/systemd/system/nvidia-persistenced.service
  deb nvidia-kernel-open-dkms "$v" ""
  deb nvidia-driver-cuda "$v" "nvidia-smi (= $v), nvidia-modprobe (= $v), nvidia-persistenced (= $v)"
done
deb nvidia-driver-pinning-580 1.0-1 "" pinning-580.pref /etc/apt/preferences.d/nvidia-driver-pinning-580
deb proxmox-default-headers 1.0-stand-in ""

"$here/../../shared/sign_repo.sh" "$out"
