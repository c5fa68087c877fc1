#!/bin/sh
# STAND-IN postinst of nvidia-kernel-open-dkms @VERSION@ (glm5svc tests only): "builds" the
# module, and fails like DKMS does when /etc/glm5-stand-in/dkms-build-fails names this release
# (a test injects a build failure that way).
if grep -qx "@VERSION@" /etc/glm5-stand-in/dkms-build-fails 2>/dev/null; then
  echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64) [STAND-IN nvidia @VERSION@]" >&2
  exit 10
fi
mkdir -p /var/lib/glm5-stand-in
echo "nvidia/@VERSION@, $(uname -r), x86_64: installed" > /var/lib/glm5-stand-in/dkms-status
