#!/bin/sh
# Starts or removes a Debian container with systemd as PID 1 for Molecule.
#   lxc_instance.sh start <lxcpath> <name> <rootfs tarball> <boot timeout s> [extra lxc config line]...
#   lxc_instance.sh remove <lxcpath> <name>
# "start" leaves a running instance alone and prints "running"; otherwise it
# unpacks the tarball, writes the config, boots and waits for systemd, then
# prints "started".
set -eu
action=$1 lxcpath=$2 name=$3
dir=$lxcpath/$name
case "$action" in
  remove)
    lxc-stop -P "$lxcpath" -n "$name" --kill >/dev/null 2>&1 || true
    rm -rf --one-file-system "$dir"
    exit 0 ;;
  start) tarball=$4 timeout=$5; shift 5 ;;
  *) echo "usage: $0 start|remove ..." >&2; exit 2 ;;
esac
if [ "$(lxc-info -P "$lxcpath" -n "$name" -sH 2>/dev/null)" = RUNNING ]; then
  echo running; exit 0
fi
lxc-stop -P "$lxcpath" -n "$name" --kill >/dev/null 2>&1 || true
rm -rf --one-file-system "$dir"
mkdir -p "$dir/rootfs"
tar --zstd -xpf "$tarball" -C "$dir/rootfs" --numeric-owner
# What the instance was made from (a prepare step may unpack it again, e.g. for a chroot).
echo "$tarball" > "$dir/rootfs-tarball"
: > "$dir/rootfs/etc/machine-id"
rm -f "$dir/rootfs/etc/resolv.conf"
cp /etc/resolv.conf "$dir/rootfs/etc/resolv.conf"
{
  echo "lxc.include = /usr/share/lxc/config/common.conf"
  echo "lxc.arch = x86_64"
  echo "lxc.uts.name = $name"
  echo "lxc.rootfs.path = dir:$dir/rootfs"
  echo "lxc.apparmor.profile = unconfined"
  echo "# Shares the host's network so apt reaches Debian's archive."
  echo "lxc.net.0.type = none"
  for line in "$@"; do echo "$line"; done
} > "$dir/config"
lxc-start -P "$lxcpath" -n "$name" -d -L "$dir/console.log"
# Right after the start systemd's bus may not exist yet: ask again until it answers.
state=
for _ in $(seq "$((timeout * 5))"); do
  state=$(lxc-attach -P "$lxcpath" -n "$name" -- timeout "$timeout" systemctl is-system-running --wait 2>/dev/null || true)
  [ -n "$state" ] && [ "$state" != offline ] && break
  sleep 0.2
done
case "$state" in
  running|degraded) echo started ;;
  *) echo "$name did not finish booting (systemd says: ${state:-nothing}); see $dir/console.log" >&2; exit 1 ;;
esac
