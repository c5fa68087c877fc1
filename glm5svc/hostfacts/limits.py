"""Resource limits the serving stack needs, for the unit, the container config and preflight.

The open-file limit is set twice on the target (the container's hard limit,
lxc.prlimit.nofile, by glm5_host_lxc_resources; the service's LimitNOFILE in glm5.service)
and read back by preflight; all three use these values. The Ansible default
glm5_host_lxc_resources_nofile must equal NOFILE (tests/ansible/test_shared_facts.py).
"""

# 1024 concurrent streams, NCCL's sockets and shared-memory files, and the shard files.
NOFILE = 1048576
# NCCL and the CUDA host allocator pin host memory.
MEMLOCK = "unlimited"
