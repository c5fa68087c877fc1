"""Ansible connection to a Proxmox VE container through its host: `pct exec <vmid> -- ...`.

Every command runs as `<host command> pct exec <vmid> -- /bin/sh -c <cmd>`, where the host
command reaches the Proxmox host: `ssh root@<host>` by default, or any argv prefix
(`glm5_pct_host_command`), e.g. `lxc-attach -n <host> --` in the lab. Files go through
stdin/stdout of `cat`, so nothing needs a copy on the host first.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: glm5_pct
short_description: Run tasks in a Proxmox VE container through `pct exec` on its host
description:
  - Runs each command as C(pct exec <vmid> -- /bin/sh -c <cmd>) on the Proxmox host,
    which is reached with C(ssh) or any command prefix.
  - Supports pipelining; put/fetch stream through C(cat).
author: glm5svc
options:
  vmid:
    description: The container's ID (CTID).
    type: str
    required: true
    vars:
      - name: glm5_pct_vmid
  proxmox_host:
    description: Address of the Proxmox host for the default ssh host command.
    type: str
    vars:
      - name: glm5_pct_proxmox_host
  proxmox_user:
    description: User on the Proxmox host (pct needs root).
    type: str
    default: root
    vars:
      - name: glm5_pct_proxmox_user
  host_command:
    description:
      - argv prefix that runs a command on the Proxmox host; the pct command follows it.
      - Default C([ssh, -o, BatchMode=yes, <user>@<proxmox_host>]). With ssh the pct
        command is passed as one shell-quoted string; with any other prefix as separate arguments.
    type: list
    elements: str
    vars:
      - name: glm5_pct_host_command
  pct_command:
    description: The pct program on the host.
    type: str
    default: pct
    vars:
      - name: glm5_pct_command
"""

import os  # noqa: E402  (Ansible reads DOCUMENTATION first, by convention)
import shlex  # noqa: E402
import subprocess  # noqa: E402

from ansible.errors import AnsibleConnectionFailure, AnsibleError  # noqa: E402
from ansible.plugins.connection import ConnectionBase  # noqa: E402


class Connection(ConnectionBase):
    transport = "glm5_pct"
    has_pipelining = True

    def _connect(self):
        self._connected = True
        return self

    def _host_prefix(self) -> tuple[list[str], bool]:
        prefix = self.get_option("host_command")
        if prefix:
            prefix = [str(part) for part in prefix]
        else:
            host = self.get_option("proxmox_host")
            if not host:
                raise AnsibleError(
                    "glm5_pct: set glm5_pct_proxmox_host (ssh to the Proxmox host) or "
                    "glm5_pct_host_command (any command prefix that runs on it)"
                )
            user = self.get_option("proxmox_user")
            prefix = ["ssh", "-o", "BatchMode=yes", f"{user}@{host}"]
        return prefix, os.path.basename(prefix[0]) == "ssh"

    def _argv(self, shell_cmd: str) -> list[str]:
        prefix, as_string = self._host_prefix()
        pct = [self.get_option("pct_command"), "exec", str(self.get_option("vmid")), "--"]
        # pct exec may clear the environment: without HOME, Ansible's `~/.ansible/tmp` would
        # be made relative to `/` (pct exec always runs as the container's root).
        inner = pct + ["/bin/sh", "-c", 'HOME="${HOME:-/root}"; export HOME; ' + shell_cmd]
        return prefix + ([shlex.join(inner)] if as_string else inner)

    def _run(self, shell_cmd: str, in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        argv = self._argv(shell_cmd)
        self._display.vvv(f"GLM5_PCT EXEC {argv!r}", host=self._play_context.remote_addr)
        try:
            proc = subprocess.run(argv, input=in_data or b"", capture_output=True, check=False)
        except OSError as exc:
            raise AnsibleConnectionFailure(f"glm5_pct: cannot run {argv[0]}: {exc}") from exc
        return proc.returncode, proc.stdout, proc.stderr

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._run(cmd, in_data)

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        with open(in_path, "rb") as source:
            data = source.read()
        rc, _, err = self._run(f"cat > {shlex.quote(out_path)}", data)
        if rc != 0:
            detail = err.decode(errors="replace")
            raise AnsibleError(f"glm5_pct: writing {out_path} failed: {detail}")

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        rc, out, err = self._run(f"cat {shlex.quote(in_path)}")
        if rc != 0:
            detail = err.decode(errors="replace")
            raise AnsibleError(f"glm5_pct: reading {in_path} failed: {detail}")
        with open(out_path, "wb") as target:
            target.write(out)

    def close(self):
        self._connected = False
