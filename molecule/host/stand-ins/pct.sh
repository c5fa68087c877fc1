#!/bin/sh
# STAND-IN for Proxmox's pct (glm5svc Molecule tests only): logs each call that would
# change something (not "status" or "config", which check mode may run). "status" reads
# /etc/glm5-stand-in/ct-<ctid>-status (default "running": a stopped container is modelled by
# writing "stopped" there); start/stop write it. "exec" runs the command in a chroot that
# stands in for the container. "create" writes a minimal config like the
# real one; "set" changes options above the first [section] the way Proxmox does: under the
# config lock (flock on /run/lock/lxc/pve-config-<ctid>.lock), the new file written as
# <file>.tmp.<pid> and renamed over it (pmxcfs allows that rename, not an in-place rewrite).
if [ "$1" != status ] && [ "$1" != config ]; then
  mkdir -p /var/log/glm5-stand-in
  echo "pct $*" >> /var/log/glm5-stand-in/calls.log
fi
state=/etc/glm5-stand-in/ct-$2-status
conf=/etc/pve/lxc/$2.conf
case "$1" in
  status) echo "status: $(cat "$state" 2>/dev/null || echo running)" ;;
  config) sed '/^\[/,$d' "$conf" ;;
  reboot) : ;;
  # A container is a chroot at /var/lib/glm5-stand-in/ct/<ctid>/rootfs (molecule/fresh).
  exec)
    [ "$3" = "--" ] || { echo "pct exec <vmid> -- <command>" >&2; exit 2; }
    ct=/var/lib/glm5-stand-in/ct/$2/rootfs; shift 3
    [ -d "$ct" ] || { echo "STAND-IN pct: no container root $ct" >&2; exit 2; }
    exec chroot "$ct" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" ;;
  start) echo running > "$state" ;;
  stop) echo stopped > "$state" ;;
  create)
    ctid=$2; shift 2
    {
      echo "arch: amd64"
      while [ $# -ge 2 ]; do
        case "$1" in --*) echo "${1#--}: $2"; shift 2 ;; *) shift ;; esac
      done
    } > "/etc/pve/lxc/$ctid.conf" ;;
  set)
    ctid=$2; shift 2
    mkdir -p /run/lock/lxc
    exec 9> "/run/lock/lxc/pve-config-$ctid.lock"
    flock -w 10 9 || { echo "can't lock file '/run/lock/lxc/pve-config-$ctid.lock' - got timeout" >&2; exit 2; }
    tmp=$conf.tmp.$$
    cp "$conf" "$tmp"
    while [ $# -ge 2 ]; do
      key=${1#--} value=$2; shift 2
      awk -v k="$key" -v v="$value" '
        BEGIN { done = 0; blank = 0 }
        !done && /^$/ { blank++; next }
        !done && /^\[/ { print k ": " v; done = 1 }
        { while (blank > 0) { print ""; blank-- } }
        !done && index($0, k ": ") == 1 { print k ": " v; done = 1; next }
        { print }
        END { if (!done) print k ": " v; while (blank > 0) { print ""; blank-- } }' "$tmp" > "$tmp.new" && mv "$tmp.new" "$tmp"
    done
    mv "$tmp" "$conf" ;;
  *) echo "STAND-IN pct: unsupported: $*" >&2; exit 2 ;;
esac
