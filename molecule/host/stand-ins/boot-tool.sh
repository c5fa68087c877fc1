#!/bin/sh
# STAND-IN for update-grub / proxmox-boot-tool (glm5svc Molecule tests only): logs each call
# that would change something; `proxmox-boot-tool status` prints what prepare_target.sh
# wrote for this target's boot layout (read-only, not logged).
if [ "$(basename "$0")" = proxmox-boot-tool ] && [ "$1" = status ]; then
  cat /etc/glm5-stand-in/boot-status 2>/dev/null && exit 0
  echo "E: /etc/kernel/proxmox-boot-uuids does not exist." >&2
  exit 2
fi
mkdir -p /var/log/glm5-stand-in
echo "$(basename "$0") $*" >> /var/log/glm5-stand-in/calls.log
