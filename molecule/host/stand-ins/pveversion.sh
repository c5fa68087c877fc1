#!/bin/sh
# STAND-IN for Proxmox's pveversion (glm5svc Molecule tests only); the
# pve-container version comes from /etc/glm5-stand-in/pve-container-version.
container=$(cat /etc/glm5-stand-in/pve-container-version)
case "$1" in
  -v|--verbose)
    echo "proxmox-ve: stand-in (running kernel: 6.8.12-4-pve)"
    echo "pve-manager: stand-in"
    echo "pve-container: $container"
    echo "lxc-pve: 6.0.0-1" ;;
  *) echo "pve-manager/stand-in (running kernel: 6.8.12-4-pve)" ;;
esac
