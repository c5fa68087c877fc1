#!/bin/sh
# Gives one target what a Proxmox VE host has and this machine lacks, written
# from the controller straight into its root file system (one call per target
# instead of a task per file through the container connection).
# Usage: prepare_target.sh <rootfs> <repo dir> <pve-container version> <kernel cmdline> <zfs-grub|systemd-boot>
#   <subscription status> <enterprise|none: a fresh Proxmox VE 9's enterprise .sources files>
#   [a newer kernel installed beside the running one, which DKMS has not built the module for]
set -eu
root=$1 repo=$2 pve_container=$3 cmdline=$4 boot=$5 subscription=$6 enterprise=$7 newer_kernel=${8:-}
here=$(cd "$(dirname "$0")" && pwd)

# The signed stand-in NVIDIA repository.
rm -rf "$root/srv/glm5-stand-in-nvidia-repo"
mkdir -p "$root/srv/glm5-stand-in-nvidia-repo"
cp -a "$repo/." "$root/srv/glm5-stand-in-nvidia-repo/"

# Only stand-in repositories: the role's apt update then needs no network.
"$here/../shared/stand_in_debian.sh" "$root" "$repo"

# Stand-in Proxmox commands.
install -m 0755 "$here/stand-ins/pct.sh" "$root/usr/local/sbin/pct"
install -m 0755 "$here/stand-ins/pveversion.sh" "$root/usr/local/sbin/pveversion"
install -m 0755 "$here/stand-ins/boot-tool.sh" "$root/usr/local/sbin/update-grub"
install -m 0755 "$here/stand-ins/boot-tool.sh" "$root/usr/local/sbin/proxmox-boot-tool"
install -m 0755 "$here/stand-ins/pvesubscription.sh" "$root/usr/local/sbin/pvesubscription"
install -m 0755 "$here/stand-ins/dkms.sh" "$root/usr/local/sbin/dkms"
install -m 0755 "$here/stand-ins/pveam.sh" "$root/usr/local/sbin/pveam"
# The container template pct create uses (roles/glm5_host_lxc_gpu defaults), downloaded.
mkdir -p "$root/var/lib/vz/template/cache"
: > "$root/var/lib/vz/template/cache/debian-12-standard_12.12-1_amd64.tar.zst"
# Proxmox's archive key where Proxmox installs it (the stand-in key, dearmored).
install -m 0644 "$repo/proxmox-archive-keyring.gpg" "$root/usr/share/keyrings/proxmox-archive-keyring.gpg"
if [ "$enterprise" = enterprise ]; then
  # What a fresh Proxmox VE 9 install writes (Package Repositories, Proxmox VE admin guide).
  suite=$(. "$root/etc/os-release" && echo "$VERSION_CODENAME")
  printf 'Types: deb\nURIs: https://enterprise.proxmox.com/debian/pve\nSuites: %s\nComponents: pve-enterprise\nSigned-By: /usr/share/keyrings/proxmox-archive-keyring.gpg\n' \
    "$suite" > "$root/etc/apt/sources.list.d/pve-enterprise.sources"
  printf 'Types: deb\nURIs: https://enterprise.proxmox.com/debian/ceph-squid\nSuites: %s\nComponents: enterprise\nSigned-By: /usr/share/keyrings/proxmox-archive-keyring.gpg\n' \
    "$suite" > "$root/etc/apt/sources.list.d/ceph.sources"
fi

stand_in=$root/etc/glm5-stand-in
mkdir -p "$stand_in/sys-module-nvidia_uvm/parameters" "$root/etc/pve/lxc" "$root/etc/default"
echo "$pve_container" > "$stand_in/pve-container-version"
echo "$subscription" > "$stand_in/subscription-status"
echo off > "$stand_in/secure-boot"
# The SecureBoot EFI variable (4 attribute bytes, then 0: off), where the inventory points the role.
printf '\006\000\000\000\000' > "$stand_in/efivar-SecureBoot"
# 8 GPUs as /proc/driver/nvidia/gpus shows them: the minors differ from the indices (which
# follow the bus ids), as they can on a real host.
minor=2
for bus in 01 21 41 61 81 a1 c1 e1; do
  mkdir -p "$stand_in/nvidia-gpus/0000:$bus:00.0"
  printf 'Model: \t\t NVIDIA RTX PRO 6000 Blackwell Server Edition\nIRQ:   \t\t 180\nBus Location: \t 0000:%s:00.0\nDevice Minor: \t %s\n' \
    "$bus" "$minor" > "$stand_in/nvidia-gpus/0000:$bus:00.0/information"
  minor=$(( (minor + 5) % 8 ))
done
echo "$cmdline" > "$stand_in/cmdline"
# The kernels proxmox-boot-tool kernel list shows (the stand-in's default: the running one).
if [ -n "$newer_kernel" ]; then
  printf '%s\n%s\n' "$(uname -r)" "$newer_kernel" > "$stand_in/kernels"
fi
# This machine's majors plus NVIDIA's, as a host with the driver lists them
# (the stand-in nvidia-smi and nvidia-modprobe make nodes with these majors).
sed 's/^Character devices:$/Character devices:\n195 nvidia\n195 nvidiactl\n240 nvidia-uvm\n241 nvidia-caps/' \
  /proc/devices > "$stand_in/proc-devices"
# A loaded nvidia_uvm with HMM on that is in use (read where the inventory points the role here).
echo N > "$stand_in/sys-module-nvidia_uvm/parameters/uvm_disable_hmm"
echo 2 > "$stand_in/sys-module-nvidia_uvm/refcnt"

# The IOMMU as sysfs shows it: on and translating (DMA-FQ, a stock 6.8+ kernel's default;
# DMA with intel_iommu=on on older kernels) whatever the command line says.
mkdir -p "$stand_in/sys/class/iommu/dmar0" "$stand_in/sys/kernel/iommu_groups/0" "$stand_in/sys/kernel/iommu_groups/1"
case "$cmdline" in *intel_iommu=on*) kind=DMA ;; *) kind=DMA-FQ ;; esac
echo "$kind" > "$stand_in/sys/kernel/iommu_groups/0/type"
echo "$kind" > "$stand_in/sys/kernel/iommu_groups/1/type"

# The GPU container's config, with a snapshot section.
cp "$here/files/200.conf" "$root/etc/pve/lxc/200.conf"

cat > "$root/etc/default/grub" <<'G'
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR="Proxmox VE"
GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on"
GRUB_CMDLINE_LINUX=""
G
# Both layouts are ZFS installs, so both have /etc/kernel/cmdline (the installer writes it on
# every ZFS install); proxmox-boot-tool status says which loader the ESPs carry.
mkdir -p "$root/etc/kernel"
echo "root=ZFS=rpool/ROOT/pve-1 boot=zfs" > "$root/etc/kernel/cmdline"
if [ "$boot" = systemd-boot ]; then
  printf 'System currently booted with uefi\n7E3A-1F2B is configured with: uefi (versions: 6.14.8-2-pve)\n' \
    > "$stand_in/boot-status"
else  # ZFS with GRUB: legacy BIOS (or Secure Boot)
  printf 'System currently booted with legacy bios\nD91B-B982 is configured with: grub (versions: 6.8.12-4-pve)\n' \
    > "$stand_in/boot-status"
fi
