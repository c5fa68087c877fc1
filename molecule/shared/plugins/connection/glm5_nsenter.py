# Copyright: glm5svc contributors. Apache-2.0.
"""community.docker.nsenter with pipelining turned on (Molecule tests only)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: glm5_nsenter
short_description: community.docker.nsenter, with pipelining
description:
  - Runs commands in the namespaces of a process (here the init of a test container) like
    community.docker.nsenter, and lets Ansible pipe modules to the interpreter on stdin, which
    saves the temporary-file round trips of every task (several nsenter calls each).
  - The base plugin passes stdin through unchanged, so pipelining works with it as it is; it
    only declares that it does not, because it cannot pipe with a become password prompt.
    The tests connect as root without become.
author: glm5svc
options:
  nsenter_pid:
    description: PID to attach with the nsenter command.
    default: ""
    vars:
      - name: ansible_nsenter_pid
    env:
      - name: ANSIBLE_NSENTER_PID
    ini:
      - section: nsenter_connection
        key: nsenter_pid
  pipelining:
    description: Pipe modules to the interpreter's stdin.
    type: bool
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    vars:
      - name: ansible_pipelining
"""

from ansible_collections.community.docker.plugins.connection.nsenter import (  # noqa: E402
    Connection as NsenterConnection,
)


class Connection(NsenterConnection):
    transport = "glm5_nsenter"
    has_pipelining = True
