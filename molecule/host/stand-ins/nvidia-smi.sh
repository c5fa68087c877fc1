#!/bin/sh
# STAND-IN for nvidia-smi @VERSION@ (glm5svc Molecule tests only): fixed output for 8 GPUs.
# Like the real one, its first call "loads the kernel module": the loaded version is kept in
# /run/glm5-stand-in/nvidia-loaded and sys-module/nvidia/version (gone at a reboot), so after a package upgrade it reports
# the old version until the next boot; with /etc/glm5-stand-in/secure-boot saying "on" the
# unsigned module does not load and it fails as the real one does. GPUs come from
# /etc/glm5-stand-in/nvidia-gpus/<bus id>/information ("Device Minor:"), laid out like
# /proc/driver/nvidia/gpus; indices follow the bus ids' order, as nvidia-smi's do. -L creates
# /dev/nvidia<minor> and /dev/nvidiactl (major 195).
mkdir -p /var/log/glm5-stand-in /run/glm5-stand-in
echo "nvidia-smi $*" >> /var/log/glm5-stand-in/calls.log
loaded=/run/glm5-stand-in/nvidia-loaded
gpus=/etc/glm5-stand-in/nvidia-gpus
if [ ! -s $loaded ]; then
  # A GPU bound to nouveau (the stand-in sysfs in /run, gone at a reboot): the module cannot
  # take it, as on a fresh host.
  if ls /run/glm5-stand-in/sys-bus-pci-drivers-nouveau 2>/dev/null | grep -q ':'; then
    echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." \
      "Make sure that the latest NVIDIA driver is installed and running." >&2
    exit 9
  fi
  if [ "$(cat /etc/glm5-stand-in/secure-boot 2>/dev/null)" = on ]; then
    echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." \
      "Make sure that the latest NVIDIA driver is installed and running." >&2
    exit 9
  fi
  echo "@VERSION@" > $loaded
  # The loaded module's own version, as /sys/module/nvidia/version shows it.
  mkdir -p /run/glm5-stand-in/sys-module/nvidia
  echo "@VERSION@" > /run/glm5-stand-in/sys-module/nvidia/version
  # The loaded module shows its GPUs in procfs (here identity minors unless a test laid
  # out others before).
  if [ ! -d $gpus ]; then
    for i in 0 1 2 3 4 5 6 7; do
      mkdir -p "$gpus/0000:0$i:00.0"
      printf 'Model: \t\t NVIDIA RTX PRO 6000 Blackwell Server Edition\nDevice Minor: \t %s\n' "$i" \
        > "$gpus/0000:0$i:00.0/information"
    done
  fi
fi
version=$(cat $loaded)
# "<index> <bus id> <minor>" per GPU.
list() {
  i=0
  for dir in $(ls $gpus | sort); do
    echo "$i $dir $(sed -n 's/^Device Minor:[[:space:]]*//p' "$gpus/$dir/information")"
    i=$((i + 1))
  done
}
node() { [ -e "$1" ] || mknod -m 0666 "$1" c "$2" "$3"; }
case "$*" in
  -L)
    list | while read -r i bus minor; do
      node /dev/nvidia"$minor" 195 "$minor"
      echo "GPU $i: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-5a0d1e00-0000-4000-8000-00000000000$i)"
    done
    node /dev/nvidiactl 195 255 ;;
  "--query-gpu=driver_version --format=csv,noheader")
    list | while read -r i bus minor; do echo "$version"; done ;;
  "--query-gpu=index,pci.bus_id --format=csv,noheader")
    list | while read -r i bus minor; do echo "$i, 0000$(echo "$bus" | tr a-f A-F)"; done ;;
  "topo -m")
    cat <<'T'
	GPU0	GPU1	GPU2	GPU3	GPU4	GPU5	GPU6	GPU7	CPU Affinity	NUMA Affinity
GPU0	 X 	PIX	NODE	NODE	SYS	SYS	SYS	SYS	0-47	0
GPU1	PIX	 X 	NODE	NODE	SYS	SYS	SYS	SYS	0-47	0
GPU2	NODE	NODE	 X 	PIX	SYS	SYS	SYS	SYS	0-47	0
GPU3	NODE	NODE	PIX	 X 	SYS	SYS	SYS	SYS	0-47	0
GPU4	SYS	SYS	SYS	SYS	 X 	PIX	NODE	NODE	48-95	1
GPU5	SYS	SYS	SYS	SYS	PIX	 X 	NODE	NODE	48-95	1
GPU6	SYS	SYS	SYS	SYS	NODE	NODE	 X 	PIX	48-95	1
GPU7	SYS	SYS	SYS	SYS	NODE	NODE	PIX	 X 	48-95	1
T
    ;;
  "topo -p2p r")
    echo " 	GPU0	GPU1	GPU2	GPU3	GPU4	GPU5	GPU6	GPU7"
    for i in 0 1 2 3 4 5 6 7; do
      row="GPU$i"
      for j in 0 1 2 3 4 5 6 7; do
        if [ $i = $j ]; then c=X; elif [ $((i / 4)) = $((j / 4)) ]; then c=OK; else c=CNS; fi
        row="$row	$c"
      done
      echo "$row"
    done ;;
  *) echo "STAND-IN nvidia-smi: unsupported arguments: $*" >&2; exit 2 ;;
esac
