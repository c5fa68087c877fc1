"""The first line `glm5svc tune apply` writes into a configuration it changed, so that a
reader (the apply itself, the unattended night) knows which run's overlay a file holds."""

from __future__ import annotations

HEADER_START = "# Tuned by `glm5svc tune apply"
