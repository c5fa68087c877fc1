#!/bin/sh
# STAND-IN for nvidia-persistenced @VERSION@ (glm5svc Molecule tests only).
echo "nvidia-persistenced $*" >> /var/log/glm5-stand-in/calls.log 2>/dev/null
exec sleep infinity
