#!/bin/sh
# LAB STAND-IN for Proxmox's pct on the stand-in host: `pct exec <vmid> -- CMD...` really
# enters the container with lxc-attach (the container runs in this host's PID namespace,
# see scripts/lab); `status` asks LXC; anything else goes to the host scenario's stand-in.
lxcpath=/var/lib/glm5-lab/lxc
name() { echo "glm5-lab-ct"; }  # the lab has one container, CTID 200
case "$1" in
  exec)
    [ "$3" = "--" ] || { echo "pct exec <vmid> -- <command>" >&2; exit 2; }
    vmid=$2; shift 3
    exec lxc-attach -P "$lxcpath" -n "$(name "$vmid")" --clear-env \
      --set-var PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -- "$@" ;;
  status)
    state=$(lxc-info -P "$lxcpath" -n "$(name "$2")" -sH 2>/dev/null)
    [ "$state" = RUNNING ] && echo "status: running" || echo "status: stopped" ;;
  *) exec /usr/local/sbin/pct-stand-in "$@" ;;
esac
