"""The lab's connection to a stand-in Proxmox host: community.docker.nsenter with pipelining.

community.docker.nsenter turns pipelining off for the password prompt of privilege
escalation, which the lab never uses (it runs as root, without become). Without pipelining
each task took four nsenter runs (temporary directory, module copy, run, clean-up); with it,
one: the module goes to the host's Python on stdin.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: glm5_lab_nsenter
short_description: community.docker.nsenter with pipelining (the lab's stand-in hosts)
description:
  - Runs each command with C(nsenter) in the namespaces of a process (the stand-in host's init).
  - Supports pipelining; privilege escalation is not supported.
author: glm5svc
options:
  nsenter_pid:
    description: PID whose namespaces the commands enter.
    type: int
    required: true
    vars:
      - name: ansible_nsenter_pid
"""

from ansible.errors import AnsibleError  # noqa: E402  (Ansible reads DOCUMENTATION first)
from ansible_collections.community.docker.plugins.connection.nsenter import (  # noqa: E402
    Connection as NsenterConnection,
)


class Connection(NsenterConnection):
    transport = "glm5_lab_nsenter"
    has_pipelining = True

    def exec_command(self, cmd, in_data=None, sudoable=True):
        if self.become is not None:
            raise AnsibleError("glm5_lab_nsenter: privilege escalation is not supported")
        return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
