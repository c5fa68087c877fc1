#!/bin/sh
# STAND-IN for Proxmox's pvesubscription (glm5svc Molecule tests only): `get` prints the
# status word in /etc/glm5-stand-in/subscription-status the way the real one prints its
# "key: value" lines.
case "$1" in
  get) echo "message: There is no subscription key"
       echo "serverid: 0123456789ABCDEF0123456789ABCDEF"
       echo "status: $(cat /etc/glm5-stand-in/subscription-status)"
       echo "url: https://www.proxmox.com/en/proxmox-virtual-environment/pricing" ;;
  *) echo "STAND-IN pvesubscription: unsupported: $*" >&2; exit 2 ;;
esac
