#!/bin/sh
# Usage: prepare_target.sh <rootfs>
set -eu
root=$1
here=$(cd "$(dirname "$0")" && pwd)
install -m 0755 "$here/../host/stand-ins/pct.sh" "$root/usr/local/sbin/pct"
mkdir -p "$root/etc/pve/lxc"
cp "$here/files/200.conf" "$root/etc/pve/lxc/200.conf"
cp "$here/files/200.conf" "$root/etc/pve/lxc/201.conf"
rm -rf "$root/srv/models" "$root/var/log/glm5-stand-in"
# Made-up sysfs: node 0 = CPUs 0-31,64-95 with 4 GPUs, node 1 = 32-63,96-127 with 4 GPUs,
# plus a GPU audio function and a NIC that must not count.
sys=$root/etc/glm5-stand-in/sys
rm -rf "$sys"
device() { # bdf vendor class node
  mkdir -p "$sys/bus/pci/devices/$1"
  echo "$2" > "$sys/bus/pci/devices/$1/vendor"
  echo "$3" > "$sys/bus/pci/devices/$1/class"
  echo "$4" > "$sys/bus/pci/devices/$1/numa_node"
}
for bus in 01 21 41 61; do device "0000:$bus:00.0" 0x10de 0x030200 0; done
for bus in 81 a1 c1 e1; do device "0000:$bus:00.0" 0x10de 0x030200 1; done
device 0000:01:00.1 0x10de 0x040300 0
device 0000:c2:00.0 0x15b3 0x020700 1
for node in 0 1; do mkdir -p "$sys/devices/system/node/node$node"; done
echo 0-31,64-95 > "$sys/devices/system/node/node0/cpulist"
echo 32-63,96-127 > "$sys/devices/system/node/node1/cpulist"
