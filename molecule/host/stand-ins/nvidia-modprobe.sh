#!/bin/sh
# STAND-IN for nvidia-modprobe @VERSION@ (glm5svc Molecule tests only): -u creates
# /dev/nvidia-uvm and /dev/nvidia-uvm-tools with the stand-in uvm major 240 and "loads"
# nvidia_uvm at the loaded nvidia module's version (sys-module/nvidia_uvm/version in /run).
mkdir -p /var/log/glm5-stand-in
echo "nvidia-modprobe $*" >> /var/log/glm5-stand-in/calls.log
case " $* " in
  *" -u "*)
    [ -e /dev/nvidia-uvm ] || mknod -m 0666 /dev/nvidia-uvm c 240 0
    [ -e /dev/nvidia-uvm-tools ] || mknod -m 0666 /dev/nvidia-uvm-tools c 240 1
    sys=/run/glm5-stand-in/sys-module
    if [ -s $sys/nvidia/version ] && [ ! -s $sys/nvidia_uvm/version ]; then
      mkdir -p $sys/nvidia_uvm && cp $sys/nvidia/version $sys/nvidia_uvm/version
    fi ;;
esac
