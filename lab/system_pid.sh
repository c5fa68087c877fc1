#!/bin/sh
# Prints the PID that community.docker.nsenter enters to reach lab system <name>
# (ansible_nsenter_pid in lab/inventory.yml): its init, as this machine numbers it.
#   lab/system_pid.sh <lxcpath> <name>
# Fails, saying why, unless that PID's UTS namespace carries <name>: a container runs in
# its host's PID namespace, so lxc-info gives its init's PID as the host numbers it, and
# here that number is another process, a kernel thread (nsenter then runs on this machine)
# or nothing (nsenter fails).
set -eu
lxcpath=$1 name=$2
pid=$(lxc-info -P "$lxcpath" -n "$name" -pH 2>/dev/null) || pid=
[ -n "$pid" ] || { echo "lab: $name is not running (lxc-info -P $lxcpath -n $name)" >&2; exit 1; }
seen=$(nsenter --target "$pid" --uts hostname 2>/dev/null) || seen=
[ "$seen" = "$name" ] || {
  echo "lab: PID $pid (lxc-info for $name) is not $name here (hostname: '${seen:-none}')" >&2
  exit 1
}
echo "$pid"
