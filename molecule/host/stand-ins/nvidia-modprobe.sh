#!/bin/sh
# STAND-IN for nvidia-modprobe @VERSION@ (glm5svc Molecule tests only): -u creates
# /dev/nvidia-uvm and /dev/nvidia-uvm-tools with the stand-in uvm major 240.
mkdir -p /var/log/glm5-stand-in
echo "nvidia-modprobe $*" >> /var/log/glm5-stand-in/calls.log
case " $* " in
  *" -u "*)
    [ -e /dev/nvidia-uvm ] || mknod -m 0666 /dev/nvidia-uvm c 240 0
    [ -e /dev/nvidia-uvm-tools ] || mknod -m 0666 /dev/nvidia-uvm-tools c 240 1 ;;
esac
