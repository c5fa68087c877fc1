#!/bin/sh
# Proves raw lxc keys that glm5_host_lxc_gpu wrote with a real LXC container on
# this machine (no GPU, no NVIDIA driver):
#   1. makes stand-in character devices with the given majors/minors in a
#      private /dev (a mount namespace of its own: the machine's /dev is untouched),
#   2. starts a container whose config carries the role's lxc.* lines,
#   3. prints, for every node inside the container: type, major:minor (hex) and
#      the error of opening it. ENXIO ("No such device or address") means the
#      cgroup rule let the open through to a kernel with no driver behind the
#      major; EPERM means the device cgroup refused it.
# A control node (major 242, no allow rule) shows that the cgroup is enforced.
# Usage: raw_lxc_proof.sh <name> <rootfs dir> <lxc lines file> <nodes file: "path major minor" lines>
set -eu
name=$1 rootfs=$2 lines=$3 nodes=$4
lxcpath=$(mktemp -d /var/lib/glm5-molecule/proof.XXXXXX)
trap 'lxc-stop -P "$lxcpath" -n "$name" --kill >/dev/null 2>&1 || true; rm -rf --one-file-system "$lxcpath"' EXIT
mkdir -p "$lxcpath/$name"
{
  echo "lxc.include = /usr/share/lxc/config/common.conf"
  echo "lxc.arch = x86_64"
  echo "lxc.uts.name = $name"
  echo "lxc.rootfs.path = dir:$rootfs"
  echo "lxc.rootfs.options = ro"
  echo "lxc.apparmor.profile = unconfined"
  echo "lxc.net.0.type = none"
  echo "lxc.init.cmd = /bin/sleep 300"
  # Proxmox writes "key: value"; LXC reads "key = value".
  sed -n 's/^\(lxc\.[A-Za-z0-9_.]*\): */\1 = /p' "$lines"
  # This machine has a cgroup v1 devices controller, where LXC ignores
  # lxc.cgroup2.* limits; the same rules as v1 keys make the allow list enforceable here.
  if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
    sed -n 's/^lxc\.cgroup2\.devices\.allow: */lxc.cgroup.devices.allow = /p' "$lines"
  fi
  echo "lxc.mount.entry = /dev/glm5-proof-control dev/glm5-proof-control none bind,create=file"
} > "$lxcpath/$name/config"

unshare -m --propagation private sh -eu -c '
  old=$(mktemp -d /run/glm5-proof-dev.XXXXXX)
  mount --bind /dev "$old"
  mount -t tmpfs -o mode=0755 tmpfs /dev
  for d in null zero full random urandom tty console; do
    touch /dev/$d; mount --bind "$old/$d" /dev/$d
  done
  mkdir /dev/pts /dev/shm /dev/mqueue
  mount --bind "$old/pts" /dev/pts; ln -s pts/ptmx /dev/ptmx
  mount --bind "$old/shm" /dev/shm
  while read -r path major minor; do
    mkdir -p "$(dirname "$path")"; mknod -m 0666 "$path" c "$major" "$minor"
  done < "$2"
  mknod -m 0666 /dev/glm5-proof-control c 242 0
  lxc-start -P "$1" -n "$3" -d
' proof "$lxcpath" "$nodes" "$name"

for _ in $(seq 50); do
  lxc-attach -P "$lxcpath" -n "$name" -- true 2>/dev/null && break
  sleep 0.2
done
lxc-attach -P "$lxcpath" -n "$name" -- sh -c '
  for node in "$@"; do
    kind=$(stat -c %F "$node" 2>/dev/null || echo missing)
    numbers=$(stat -c %t:%T "$node" 2>/dev/null || echo -)
    err=$( (: < "$node") 2>&1 | sed "s/.*: //")
    echo "NODE $node|$kind|$numbers|${err:-opened}"
  done
' proof $(cut -d" " -f1 "$nodes") /dev/glm5-proof-control
