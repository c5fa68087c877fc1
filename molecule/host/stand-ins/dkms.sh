#!/bin/sh
# STAND-IN for dkms (glm5svc Molecule tests only): `dkms status` prints what the stand-in
# nvidia-kernel-open-dkms postinst "built" (and what a test adds).
[ "$1" = status ] && cat /var/lib/glm5-stand-in/dkms-status 2>/dev/null
exit 0
