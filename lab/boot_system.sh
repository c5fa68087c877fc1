#!/bin/sh
# Starts one lab system and waits until its systemd has finished booting (lab/tasks/system.yml).
#   lab/boot_system.sh start <lxcpath> <name> <timeout s> [<parent>]
#   lab/boot_system.sh wait  <lxcpath> <name> <timeout s> [<parent>]
# With <parent>, the system runs in the parent's PID namespace and is reached through it
# (lxc-attach into the parent, then lxc-attach into the system), the way site.yml reaches
# the container. Nothing is retried: every wait is for one named condition, up to the
# timeout, and a failure says which condition did not come true and where the logs are.
set -eu
action=$1 lxcpath=$2 name=$3 timeout=$4 parent=${5:-}
dir=$lxcpath/$name
deadline=$(($(date +%s) + timeout))

in_system() {
  if [ -n "$parent" ]; then
    lxc-attach -P "$lxcpath" -n "$parent" -- lxc-attach -P "$lxcpath" -n "$name" -- "$@"
  else
    lxc-attach -P "$lxcpath" -n "$name" -- "$@"
  fi
}

seconds_left() { echo $((deadline - $(date +%s))); }

start() {
  set -- lxc-start -P "$lxcpath" -n "$name" -d -L "$dir/console.log" -l INFO -o "$dir/lxc-start.log"
  rm -f "$dir/lxc-start.log"
  if [ -n "$parent" ]; then
    ns_pid=$(lxc-info -P "$lxcpath" -n "$parent" -pH)
    [ -n "$ns_pid" ] || { echo "$parent is not running: start it first" >&2; exit 1; }
    # lxc-start opens /proc/<pid>/ns/* of the init it clones, by the PID it got from clone(),
    # which is numbered in the parent's PID namespace. This machine's /proc numbers PIDs in
    # the initial namespace, so right after the parent booted (small PIDs) it opened some
    # kernel thread's namespaces instead and aborted ("ABORTING" instead of "RUNNING").
    # A mount namespace of its own with a /proc of the parent's PID namespace fixes that.
    nsenter -t "$ns_pid" --pid -- unshare --mount --propagation slave -- \
      sh -c 'mount -t proc proc /proc && exec "$@"' lab-pid-ns "$@" || failed_start
  else
    "$@" || failed_start
  fi
}

failed_start() {
  echo "lxc-start $name failed; the end of $dir/lxc-start.log:" >&2
  tail -n 15 "$dir/lxc-start.log" >&2 || true
  exit 1
}

wait_booted() {
  # systemctl reaches systemd through /run/systemd/private, which systemd creates a moment
  # after it starts; before that systemctl fails ("Failed to connect to system scope bus").
  until in_system test -S /run/systemd/private 2>/dev/null; do
    if [ "$(seconds_left)" -le 0 ]; then
      echo "$name: systemd did not create /run/systemd/private within ${timeout}s of the" \
        "start; see $dir/console.log and $dir/lxc-start.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  # --wait: returns once the boot transaction is done (no start-up jobs left).
  left=$(seconds_left)
  [ "$left" -gt 0 ] || left=1
  state=$(in_system timeout "$left" systemctl is-system-running --wait 2>&1 || true)
  case "$state" in
    running) echo "$name: booted" ;;
    degraded)
      echo "$name: booted, degraded; failed units:"
      in_system systemctl --failed --no-legend --plain --no-pager || true ;;
    *)
      echo "$name: systemd had not finished booting ${timeout}s after the start (says:" \
        "'${state:-nothing}'); jobs still queued:" >&2
      in_system systemctl list-jobs --no-pager >&2 || true
      echo "see $dir/console.log" >&2
      exit 1 ;;
  esac
}

case "$action" in
  start) start; wait_booted ;;
  wait) wait_booted ;;
  *) echo "usage: $0 start|wait <lxcpath> <name> <timeout s> [<parent>]" >&2; exit 2 ;;
esac
