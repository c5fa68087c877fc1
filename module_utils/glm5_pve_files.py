"""How Proxmox VE locks and writes a guest's config, for library/glm5_pve_lxc_config.py.

Proxmox takes `flock` on /run/lock/lxc/pve-config-<vmid>.lock around every change of
/etc/pve/lxc/<vmid>.conf (pve-container, PVE::LXC::Config::config_file_lock; the wait is
10 s by default in pve-common's PVE::Tools::lock_file_full) and writes the file as a
temporary file renamed over it (pve-common, PVE::File::file_set_contents). Stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time


def write_like_proxmox(path: str, text: str) -> None:
    """A temporary file renamed over the config, as PVE::Tools::file_set_contents does; pmxcfs
    allows that rename but no chmod, so the mode is left to it."""
    temp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def config_lock_path(path: str, lock_dir: str) -> str:
    """Proxmox's lock for this config: PVE::LXC::Config::config_file_lock."""
    name = os.path.basename(path)
    vmid = name[: -len(".conf")] if name.endswith(".conf") else ""
    if not vmid.isdigit():
        raise ValueError(f"{path}: not a container config (<vmid>.conf), cannot find its lock")
    return os.path.join(lock_dir, f"pve-config-{vmid}.lock")


@contextlib.contextmanager
def config_lock(lock_path: str, timeout: int):
    """flock(LOCK_EX) on Proxmox's lock file, waiting up to timeout seconds."""
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "a", encoding="utf-8") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{lock_path} stays locked (pct or the API is changing the container) "
                        f"after {timeout} s: run again when it is done, or raise lock_timeout"
                    ) from None
                time.sleep(0.2)
        yield
