#!/bin/sh
# STAND-IN systemctl inside the chroot that stands in for container 200 (glm5svc tests only):
# start and stop of a unit write its state (what the upgrade play's checks read), each call
# that changes something is logged.
dir=/var/lib/glm5-stand-in/units
mkdir -p "$dir" /var/log/glm5-stand-in
case "$1" in
  start|stop) echo "systemctl $*" >> /var/log/glm5-stand-in/systemctl.log ;;
esac
case "$1" in
  start) echo active > "$dir/$2" ;;
  stop) echo inactive > "$dir/$2" ;;
  is-active) state=$(cat "$dir/$2" 2>/dev/null || echo inactive); echo "$state"; [ "$state" = active ] ;;
  *) echo "STAND-IN systemctl: unsupported: $*" >&2; exit 2 ;;
esac
