#!/bin/sh
# pip in a target must trust what this machine trusts (a TLS-inspecting proxy's CA, where
# there is one): this machine's bundle becomes the target's system bundle (kept by
# update-ca-certificates) and pip's. Usage: trust_this_machine.sh <target's root file system>
set -eu
root=$1
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/glm5-this-machine.crt"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$root/etc/pip.conf"
