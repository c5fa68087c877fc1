#!/bin/sh
# Proves a raw "lxc.mount.entry: <host dir> <ct path> none bind,ro,create=dir 0 0" line that
# glm5_host_lxc_resources wrote, with a real LXC container on this machine: the host
# directory is the target's (it lies under the target's root file system here). Prints
#   WRITE|<error of creating a file inside>   (Read-only file system expected)
#   SEEN|<content of a file written on the host side after the start>
#   MOUNT|<ct path>|<ro or rw, from /proc/self/mountinfo>
# Usage: mount_proof.sh <name> <target rootfs> <the lxc.mount.entry line>
set -eu
name=$1 rootfs=$2 line=$3
entry=${line#lxc.mount.entry: }
src=${entry%% *}
rest=${entry#* }
target=${rest%% *}
lxcpath=$(mktemp -d /var/lib/glm5-molecule/proof.XXXXXX)
trap 'lxc-stop -P "$lxcpath" -n "$name" --kill >/dev/null 2>&1 || true; rm -rf --one-file-system "$lxcpath"' EXIT
mkdir -p "$lxcpath/$name" "$rootfs/$target"
rm -f "$rootfs$src/written-on-host"
cat > "$lxcpath/$name/config" <<CONF
lxc.include = /usr/share/lxc/config/common.conf
lxc.arch = x86_64
lxc.uts.name = $name
lxc.rootfs.path = dir:$rootfs
lxc.rootfs.options = ro
lxc.apparmor.profile = unconfined
lxc.net.0.type = none
lxc.init.cmd = /bin/sleep 300
lxc.mount.entry = $rootfs$src $rest
CONF
lxc-start -P "$lxcpath" -n "$name" -d
for _ in $(seq 50); do
  lxc-attach -P "$lxcpath" -n "$name" -- true 2>/dev/null && break
  sleep 0.2
done
echo "written on the host side $(date +%s)" > "$rootfs$src/written-on-host"
lxc-attach -P "$lxcpath" -n "$name" -- sh -c '
  dir=/$1
  err=$( (echo x > "$dir/written-inside") 2>&1 | sed "s/.*: //")
  echo "WRITE|${err:-written}"
  echo "SEEN|$(cat "$dir/written-on-host" 2>&1)"
  awk -v d="$dir" "\$5 == d { split(\$6, o, \",\"); print \"MOUNT|\" d \"|\" o[1] }" /proc/self/mountinfo
' proof "$target"
