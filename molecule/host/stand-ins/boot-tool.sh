#!/bin/sh
# STAND-IN for update-grub / proxmox-boot-tool (glm5svc Molecule tests only): logs the call.
mkdir -p /var/log/glm5-stand-in
echo "$(basename "$0") $*" >> /var/log/glm5-stand-in/calls.log
