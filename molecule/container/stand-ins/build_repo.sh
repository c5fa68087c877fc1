#!/bin/sh
# Builds the stand-in NVIDIA repositories for the container roles: the host scenario's
# (molecule/host/stand-ins/build_repo.sh: debian12 with 580.95.05 and 590.44.01, debian13
# with 590.44.01, whose nvidia-smi prints its own version, and the stand-in Debian archive)
# plus STAND-IN CUDA toolkits as NVIDIA ships them: cuda-toolkit-12-8 in debian12 only,
# cuda-toolkit-13-1 (the "system CUDA") in both, and CUDA 12.8.1 redistributable archives
# with their manifest under <out>/redist/ (what Debian 13 gets). Re-signed with one fresh
# key (molecule/shared/sign_repo.sh). Nothing in it is NVIDIA software. Usage: build_repo.sh <out>
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
"$here/../../host/stand-ins/build_repo.sh" "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# toolkit <major.minor> <full version>: /usr/local/cuda-X.Y with an nvcc that tells its
# release; registers the `cuda` alternative the way NVIDIA's packages do (priority XY).
toolkit() {
  mm=$1 full=$2 dir=$3 name=cuda-toolkit-$(echo "$1" | tr . -)
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
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$dir/${name}_${full}-1_all.deb" >/dev/null
}
toolkit 12.8 12.8.93 "$out/debian12/x86_64"
toolkit 13.1 13.1.80 "$out/debian12/x86_64"
toolkit 13.1 13.1.80 "$out/debian13/x86_64"

# redist <component> <version> <file path inside>...: an archive laid out like NVIDIA's
# (<component>-linux-x86_64-<version>-archive/ at the top), files from here-documents below.
mkdir -p "$out/redist"
manifest=$out/redist/redistrib_12.8.1.json
printf '{\n  "release_date": "2025-03-05",\n  "release_label": "12.8.1",\n  "release_product": "cuda"' > "$manifest"
redist() {
  comp=$1 version=$2; shift 2
  top=$comp-linux-x86_64-$version-archive
  rm -rf "$work/$top"; mkdir -p "$work/$top"
  for f in "$@"; do
    mkdir -p "$work/$top/$(dirname "$f")"
    case "$f" in
      bin/nvcc) printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver (STAND-IN, redist)"\necho "Cuda compilation tools, release 12.8, V%s"\n' "$version" > "$work/$top/$f"; chmod 0755 "$work/$top/$f" ;;
      *) echo "/* STAND-IN for $comp $version: $f */" > "$work/$top/$f" ;;
    esac
  done
  rel=$comp/linux-x86_64/$top.tar.xz
  mkdir -p "$out/redist/$(dirname "$rel")"
  tar -C "$work" -cJf "$out/redist/$rel" "$top"
  sum=$(sha256sum "$out/redist/$rel" | cut -d' ' -f1)
  printf ',\n  "%s": {"name": "%s", "version": "%s", "linux-x86_64": {"relative_path": "%s", "sha256": "%s", "size": "%s"}}' \
    "$comp" "$comp" "$version" "$rel" "$sum" "$(stat -c %s "$out/redist/$rel")" >> "$manifest"
}
redist cuda_nvcc 12.8.93 bin/nvcc include/crt/host_config.h nvvm/libdevice/libdevice.10.bc
redist cuda_cudart 12.8.90 include/cuda_runtime.h lib/libcudart.so.12
redist cuda_cccl 12.8.90 include/cuda/std/version include/cub/cub.cuh
redist cuda_nvrtc 12.8.93 include/nvrtc.h lib/libnvrtc.so.12
printf '\n}\n' >> "$manifest"

"$here/../../shared/sign_repo.sh" "$out" "$out/debian12/x86_64" "$out/debian13/x86_64" "$out/debian-archive"
cp "$out/stand-in-key.asc" "$out/debian12/x86_64/3bf863cc.pub"
cp "$out/stand-in-key.asc" "$out/debian13/x86_64/8793F200.pub"
