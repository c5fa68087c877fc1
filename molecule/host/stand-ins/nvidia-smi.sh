#!/bin/sh
# STAND-IN for nvidia-smi @VERSION@ (glm5svc Molecule tests only): fixed output
# for 8 GPUs; -L creates /dev/nvidia0..7 and /dev/nvidiactl like the real driver.
mkdir -p /var/log/glm5-stand-in
echo "nvidia-smi $*" >> /var/log/glm5-stand-in/calls.log
node() { [ -e "$1" ] || mknod -m 0666 "$1" c "$2" "$3"; }
case "$*" in
  -L)
    for i in 0 1 2 3 4 5 6 7; do
      node /dev/nvidia$i 195 $i
      echo "GPU $i: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-5a0d1e00-0000-4000-8000-00000000000$i)"
    done
    node /dev/nvidiactl 195 255 ;;
  "--query-gpu=driver_version --format=csv,noheader")
    for i in 0 1 2 3 4 5 6 7; do echo "@VERSION@"; done ;;
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
