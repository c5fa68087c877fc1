"""Resource limits the serving stack needs, for the unit, the container config and preflight.

The open-file limit is set twice on the target (the container's hard limit,
lxc.prlimit.nofile, by glm5_host_lxc_resources; the service's LimitNOFILE in glm5.service)
and read back by preflight; all three use these values. The Ansible default
glm5_host_lxc_resources_nofile must equal NOFILE (tests/ansible/test_shared_facts.py).

Two numbers, two facts:
- MIN_NOFILE is what the server needs: sglang raises its own soft RLIMIT_NOFILE to 65535 at
  start (`set_ulimit(target_soft_limit=65535)` in sglang/srt/utils/common.py, called by
  sglang/srt/entrypoints/engine.py; the same in 0.5.9, 0.5.10.post1 and 0.5.11). Below a
  hard limit of 65535 its setrlimit fails, it logs "Fail to set RLIMIT_NOFILE" and serves
  with the lower limit: each open stream holds a socket, and NCCL, the shared-memory
  files and the shard files take more. Every preflight row judges against this one.
- NOFILE is what the unit and the container set: the kernel's default fs.nr_open
  (1048576), the most a process can get without raising that sysctl; well above MIN_NOFILE.
"""

# The hard open-file limit below which sglang cannot raise its soft limit to its target.
MIN_NOFILE = 65535
# LimitNOFILE and lxc.prlimit.nofile: the kernel's default fs.nr_open.
NOFILE = 1048576
# NCCL and the CUDA host allocator pin host memory.
MEMLOCK = "unlimited"
