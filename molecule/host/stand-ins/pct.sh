#!/bin/sh
# STAND-IN for Proxmox's pct (glm5svc Molecule tests only): logs each call that would
# change something (not "status", which check mode may run); "status" says running;
# "create" writes a minimal config like the real one.
if [ "$1" != status ]; then
  mkdir -p /var/log/glm5-stand-in
  echo "pct $*" >> /var/log/glm5-stand-in/calls.log
fi
case "$1" in
  status) echo "status: running" ;;
  reboot|start|stop) : ;;
  create)
    ctid=$2; shift 2
    {
      echo "arch: amd64"
      while [ $# -ge 2 ]; do
        case "$1" in --*) echo "${1#--}: $2"; shift 2 ;; *) shift ;; esac
      done
    } > "/etc/pve/lxc/$ctid.conf" ;;
  *) echo "STAND-IN pct: unsupported: $*" >&2; exit 2 ;;
esac
