#!/bin/sh
# LAB STAND-IN for Proxmox's pct on the stand-in host: `pct exec <vmid> -- CMD...` really
# enters the container with lxc-attach (the container runs in this host's PID namespace,
# see scripts/lab); `status` asks LXC; anything else goes to the host scenario's stand-in.
lxcpath=/var/lib/glm5-lab/lxc
# The LXC name of a CTID on this host (lab/up.yml writes it).
name() { cat "/etc/glm5-stand-in/lxc-name-$1" 2>/dev/null || { echo "pct: no CT $1 on this host" >&2; return 2; }; }
case "$1" in
  exec)
    [ "$3" = "--" ] || { echo "pct exec <vmid> -- <command>" >&2; exit 2; }
    ct=$(name "$2") || exit 2; shift 3
    exec lxc-attach -P "$lxcpath" -n "$ct" --clear-env \
      --set-var PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -- "$@" ;;
  status)
    ct=$(name "$2") || exit 2
    state=$(lxc-info -P "$lxcpath" -n "$ct" -sH 2>/dev/null)
    [ "$state" = RUNNING ] && echo "status: running" || echo "status: stopped" ;;
  *) exec /usr/local/sbin/pct-stand-in "$@" ;;
esac
