#!/bin/sh
# A FRESH stand-in Proxmox VE host: molecule/host/prepare_target.sh's stand-ins (repository,
# pct, pveversion, boot tools, GPUs in procfs, Secure Boot off, no subscription and no
# enterprise entries), but no container config; nvidia_uvm not loaded. pct create's container
# is a chroot that waits at /var/lib/glm5-stand-in/ct/200/rootfs (the stand-in pct exec enters
# it): the host's own root file system again (the container play's packages) with the stand-in
# archive and NVIDIA's stand-in repository, this machine's CA bundle and name servers (pip
# reaches PyPI), the test engine, an empty model directory, and a STAND-IN systemctl that runs
# glm5.service (files/systemctl.py). Mount units of the stand-in system give it what a real
# container has: its own /proc, a tmpfs /run, and pip's cache (this machine's, bound in).
# Usage: prepare_target.sh <rootfs> <repo dir> <pve-container version> <kernel cmdline>
set -eu
root=$1 repo=$2 pve_container=$3 cmdline=$4
here=$(cd "$(dirname "$0")" && pwd)
"$here/../host/prepare_target.sh" "$root" "$repo" "$pve_container" "$cmdline" systemd-boot notfound none
rm -f "$root/etc/pve/lxc/200.conf"
# A fresh host has no container template yet (converge.yml: the first run names pveam download).
rm -f "$root/var/lib/vz/template/cache/"*
# pct create leaves a container stopped.
echo stopped > "$root/etc/glm5-stand-in/ct-200-status"
rm -rf "$root/etc/glm5-stand-in/sys-module-nvidia_uvm"
# The reboot stand-in (glm5_host_nvidia_driver_reboot_command): what a reboot does to the
# stand-ins' state in /run, and a new boot id for the role's boot check.
echo first-boot > "$root/etc/glm5-stand-in/boot-id"
cat > "$root/usr/local/sbin/glm5-stand-in-reboot" <<'R'
#!/bin/sh
# STAND-IN reboot (glm5svc tests only): forgets the loaded modules and nouveau's hold (/run).
echo "reboot" >> /var/log/glm5-stand-in/calls.log
rm -rf /run/glm5-stand-in /var/lib/glm5-stand-in/ct/*/rootfs/run/glm5-stand-in
cat /proc/sys/kernel/random/uuid > /etc/glm5-stand-in/boot-id
# What the next boot runs before the guests: the device-node unit loads both modules.
systemctl restart glm5-nvidia-device-nodes.service
R
chmod 0755 "$root/usr/local/sbin/glm5-stand-in-reboot"

distro=debian$(. "$root/etc/os-release" && echo "$VERSION_ID")
ctdir=/var/lib/glm5-stand-in/ct/200/rootfs
ct=$root$ctdir
# The tarball the stand-in host was made from (molecule/shared/lxc_instance.sh).
rm -rf "$ct"; mkdir -p "$ct"
tar --zstd -xpf "$(cat "$root/../rootfs-tarball")" -C "$ct" --numeric-owner
[ -e "$ct/dev/null" ] || mknod -m 0666 "$ct/dev/null" c 1 3
mkdir -p "$ct/srv/glm5-stand-in-nvidia-repo"
cp -a "$repo/." "$ct/srv/glm5-stand-in-nvidia-repo/"
"$here/../shared/stand_in_debian.sh" "$ct" "$repo"
sed -i 's/^Components: main$/Components: main contrib/' "$ct/etc/apt/sources.list.d/debian.sources"
mkdir -p "$ct/etc/apt/keyrings"
install -m 0644 "$repo/stand-in-key.asc" "$ct/etc/apt/keyrings/nvidia-cuda.asc"
cat > "$ct/etc/apt/sources.list.d/nvidia-cuda.sources" <<S
Types: deb
URIs: file:///srv/glm5-stand-in-nvidia-repo/$distro/x86_64/
Suites: /
Signed-By: /etc/apt/keyrings/nvidia-cuda.asc
S
install -m 0755 "$here/files/systemctl.py" "$ct/usr/local/bin/systemctl"
"$here/../shared/trust_this_machine.sh" "$ct"
rm -f "$ct/etc/resolv.conf"; cp /etc/resolv.conf "$ct/etc/resolv.conf"
mkdir -p "$ct/opt/glm5/test-engine" "$ct/models/stand-in" "$ct/root/.cache/pip"
install -m 0644 "$here/../../testkit/sglang_test_engine.py" "$ct/opt/glm5/test-engine/"

# mount_unit <what> <where in the container> <type> <options>: a mount unit of the stand-in system,
# mounted at each of its boots (so its restart, the stand-in reboot, empties the tmpfs /run)
# and by glm5-stand-in-ct-200-mounts.target (prepare.yml).
units=
mount_unit() {
  unit=$(systemd-escape --path --suffix=mount "$ctdir$2")
  units="$units $unit"
  cat > "$root/etc/systemd/system/$unit" <<U
[Unit]
Description=STAND-IN $2 of container 200 (glm5svc tests only)

[Mount]
What=$1
Where=$ctdir$2
Type=$3
Options=$4

[Install]
WantedBy=local-fs.target
U
  mkdir -p "$root/etc/systemd/system/local-fs.target.wants"
  ln -sf "../$unit" "$root/etc/systemd/system/local-fs.target.wants/$unit"
}
mount_unit tmpfs /run tmpfs mode=0755,nosuid,nodev
mount_unit proc /proc proc nosuid,nodev,noexec
# molecule.yml binds this machine's pip cache to /var/cache/glm5-molecule-pip in the host.
mount_unit /var/cache/glm5-molecule-pip /root/.cache/pip none bind
cat > "$root/etc/systemd/system/glm5-stand-in-ct-200-mounts.target" <<U
[Unit]
Description=STAND-IN container 200's mounts (glm5svc tests only)
Wants=$units
After=$units
U
