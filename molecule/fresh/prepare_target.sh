#!/bin/sh
# A FRESH stand-in Proxmox VE host: molecule/host/prepare_target.sh's stand-ins (repository,
# pct, pveversion, boot tools, GPUs in procfs, Secure Boot off, no subscription and no
# enterprise entries), but no container config; nvidia_uvm not loaded. pct create's container
# is a chroot that waits at /var/lib/glm5-stand-in/ct/200/rootfs (the stand-in pct exec enters
# it): a Debian root file system of the host's release with the stand-in archive and NVIDIA's
# stand-in repository, and a stand-in systemctl that keeps glm5.service's state.
# Usage: prepare_target.sh <rootfs> <repo dir> <pve-container version> <kernel cmdline> <molecule cache>
set -eu
root=$1 repo=$2 pve_container=$3 cmdline=$4 cache=$5
here=$(cd "$(dirname "$0")" && pwd)
"$here/../host/prepare_target.sh" "$root" "$repo" "$pve_container" "$cmdline" systemd-boot notfound none
rm -f "$root/etc/pve/lxc/200.conf"
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

suite=$(. "$root/etc/os-release" && echo "$VERSION_CODENAME")
distro=debian$(. "$root/etc/os-release" && echo "$VERSION_ID")
ct=$root/var/lib/glm5-stand-in/ct/200/rootfs
# The newest finished tarball of the suite (another scenario may be writing a .part one).
tarball=$(ls -t "$cache"/rootfs-"$suite"-*.tar.zst | grep -v '\.part\.tar\.zst$' | head -n 1)
rm -rf "$ct"; mkdir -p "$ct"
tar --zstd -xpf "$tarball" -C "$ct" --numeric-owner
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
install -m 0755 "$here/files/systemctl.sh" "$ct/usr/local/bin/systemctl"
# The container's /run is a tmpfs, as a real container's is: mounted at each boot of the
# stand-in system, so its restart (the stand-in reboot) empties it.
unit='var-lib-glm5\x2dstand\x2din-ct-200-rootfs-run.mount'
cat > "$root/etc/systemd/system/$unit" <<U
[Unit]
Description=STAND-IN /run of container 200 (glm5svc tests only)

[Mount]
What=tmpfs
Where=/var/lib/glm5-stand-in/ct/200/rootfs/run
Type=tmpfs
Options=mode=0755,nosuid,nodev

[Install]
WantedBy=local-fs.target
U
mkdir -p "$root/etc/systemd/system/local-fs.target.wants"
ln -sf "../$unit" "$root/etc/systemd/system/local-fs.target.wants/$unit"
