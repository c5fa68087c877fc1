#!/bin/sh
# STAND-IN for Proxmox's pveam (glm5svc Molecule tests only), storage "local" only, whose
# templates live in /var/lib/vz/template/cache as on Proxmox VE: "list" prints them as pveam
# does (a NAME/SIZE header, then local:vztmpl/<file> and its size), "download" writes an
# empty file of that name and logs the call, "update" logs it.
cache=/var/lib/vz/template/cache
case "$1" in
  list)
    [ "$2" = local ] || { echo "storage '$2' does not exist" >&2; exit 255; }
    printf '%-60s %s\n' NAME SIZE
    for f in "$cache"/*; do
      [ -f "$f" ] && printf '%-60s %s\n' "local:vztmpl/${f##*/}" 120.28MB
    done
    exit 0 ;;
  download)
    [ "$2" = local ] || { echo "storage '$2' does not exist" >&2; exit 255; }
    mkdir -p "$cache" /var/log/glm5-stand-in
    echo "pveam $*" >> /var/log/glm5-stand-in/calls.log
    : > "$cache/$3" ;;
  update)
    mkdir -p /var/log/glm5-stand-in
    echo "pveam update" >> /var/log/glm5-stand-in/calls.log
    echo "update successful" ;;
  *) echo "STAND-IN pveam: unsupported: $*" >&2; exit 2 ;;
esac
