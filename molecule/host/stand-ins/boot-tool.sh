#!/bin/sh
# STAND-IN for update-grub / proxmox-boot-tool (glm5svc Molecule tests only): logs each call
# that would change something; `proxmox-boot-tool status` prints what prepare_target.sh
# wrote for this target's boot layout and `kernel list` the kernels it "installed"
# (/etc/glm5-stand-in/kernels, else the running one) with the pin, as proxmox-kernel-helper
# prints them (both read-only, not logged). `kernel pin`/`unpin` write/remove the pin file.
pin=/etc/kernel/proxmox-boot-pin
if [ "$(basename "$0")" = proxmox-boot-tool ]; then
  case "$1 $2" in
    "status ")
      cat /etc/glm5-stand-in/boot-status 2>/dev/null && exit 0
      echo "E: /etc/kernel/proxmox-boot-uuids does not exist." >&2
      exit 2 ;;
    "kernel list")
      printf 'Manually selected kernels:\nNone.\n\nAutomatically selected kernels:\n'
      cat /etc/glm5-stand-in/kernels 2>/dev/null || uname -r
      [ ! -f "$pin" ] || printf '\nPinned kernel:\n%s\n' "$(cat "$pin")"
      exit 0 ;;
    "kernel pin") mkdir -p /etc/kernel && echo "$3" > "$pin" ;;
    "kernel unpin") rm -f "$pin" ;;
  esac
fi
mkdir -p /var/log/glm5-stand-in
echo "$(basename "$0") $*" >> /var/log/glm5-stand-in/calls.log
