#!/bin/sh
# Builds the stand-in NVIDIA repository for the container roles: the host scenario's
# packages (molecule/host/stand-ins/build_repo.sh: nvidia-driver-cuda 580.95.05 and
# 590.44.01, whose nvidia-smi prints its own version) plus STAND-IN CUDA toolkits
# (cuda-toolkit-12-8, and cuda-toolkit-13-1 as the "system CUDA"), re-indexed and
# signed with a fresh key (molecule/shared/sign_repo.sh). Nothing in it is NVIDIA software. Usage: build_repo.sh <out>
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
"$here/../../host/stand-ins/build_repo.sh" "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# toolkit <major.minor> <full version>: /usr/local/cuda-X.Y with an nvcc that tells its
# release; registers the `cuda` alternative the way NVIDIA's packages do (priority XY).
toolkit() {
  mm=$1 full=$2 name=cuda-toolkit-$(echo "$1" | tr . -)
  root=$work/$name
  mkdir -p "$root/DEBIAN" "$root/usr/local/cuda-$mm/bin" "$root/usr/share/doc/$name"
  echo "STAND-IN for $name, built by glm5svc molecule tests" > "$root/usr/share/doc/$name/STAND-IN"
  printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver (STAND-IN)"\necho "Cuda compilation tools, release %s, V%s"\n' \
    "$mm" "$full" > "$root/usr/local/cuda-$mm/bin/nvcc"
  chmod 0755 "$root/usr/local/cuda-$mm/bin/nvcc"
  echo "{\"cuda\": {\"name\": \"CUDA SDK\", \"version\": \"$full\"}}" > "$root/usr/local/cuda-$mm/version.json"
  printf '#!/bin/sh\nset -e\nupdate-alternatives --install /usr/local/cuda cuda /usr/local/cuda-%s %s\n' \
    "$mm" "$(echo "$mm" | tr -d .)" > "$root/DEBIAN/postinst"
  printf '#!/bin/sh\nset -e\n[ "$1" = remove ] && update-alternatives --remove cuda /usr/local/cuda-%s || true\n' \
    "$mm" > "$root/DEBIAN/prerm"
  chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm"
  {
    echo "Package: $name"; echo "Version: $full-1"; echo "Architecture: all"
    echo "Maintainer: glm5svc tests <tests@invalid>"
    echo "Description: STAND-IN for $name (glm5svc Molecule tests only)"
  } > "$root/DEBIAN/control"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/${name}_${full}-1_all.deb" >/dev/null
}
toolkit 12.8 12.8.93
toolkit 13.1 13.1.80

"$here/../../shared/sign_repo.sh" "$out"
