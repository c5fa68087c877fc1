#!/bin/sh
# Points a target's apt at the STAND-IN Debian archive built by molecule/host/stand-ins/
# build_repo.sh (Debian's own sources are moved aside, so apt needs no network and flaky
# mirrors cannot fail a scenario). Like a fresh install, only "main" is listed: NVIDIA's
# packages need contrib (nvidia-support), which the roles must add.
# Usage: stand_in_debian.sh <rootfs> <stand-in repo dir as copied to /srv/glm5-stand-in-nvidia-repo>
set -eu
root=$1 repo=$2
for f in etc/apt/sources.list etc/apt/sources.list.d/debian.sources; do
  [ -f "$root/$f" ] && mv "$root/$f" "$root/etc/apt/$(basename "$f").glm5-test-off"
done
suite=$(. "$root/etc/os-release" && echo "$VERSION_CODENAME")
install -m 0644 "$repo/stand-in-key.asc" "$root/usr/share/keyrings/glm5-stand-in-debian.asc"
cat > "$root/etc/apt/sources.list.d/debian.sources" <<S
Types: deb
URIs: file:///srv/glm5-stand-in-nvidia-repo/debian-archive/
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/glm5-stand-in-debian.asc
S
