#!/usr/bin/python
# Copyright: glm5svc contributors. Apache-2.0.
"""The NUMA nodes of the host's NVIDIA GPUs and the CPUs of those nodes (read from sysfs)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: glm5_gpu_numa_facts
short_description: NUMA placement of the host's NVIDIA GPUs, as an LXC cpuset
description:
  - Reads C(/sys/bus/pci/devices/<bdf>/numa_node) of every NVIDIA display or 3D controller
    (vendor C(0x10de), class C(0x0300xx) or C(0x0302xx)) and
    C(/sys/devices/system/node/node*/cpulist), and returns the CPUs and memory nodes of the
    GPUs' NUMA nodes, ready for
    C(lxc.cgroup2.cpuset.cpus) and C(lxc.cgroup2.cpuset.mems).
  - Reads only; never changes anything.
options:
  sysfs_root:
    description: Where sysfs is mounted (tests point it at a made-up tree).
    type: path
    default: /sys
  gpu_bdfs:
    description: Only these PCI addresses (e.g. C(0000:41:00.0)); empty means every NVIDIA GPU.
    type: list
    elements: str
    default: []
author: glm5svc contributors (@glm5svc)
attributes:
  check_mode:
    description: Runs in check mode and reports what it would change.
    support: full
"""

EXAMPLES = r"""
- name: Find the GPUs' NUMA nodes
  glm5_gpu_numa_facts:
  register: numa

- name: Show the cpuset for the container
  ansible.builtin.debug:
    msg: "{{ numa.cpuset_cpus }} on nodes {{ numa.cpuset_mems }}"
"""

RETURN = r"""
gpus:
  description: Each GPU's PCI address and NUMA node (-1 when the platform reports none).
  returned: always
  type: list
numa_nodes:
  description: The NUMA nodes the GPUs sit on, sorted.
  returned: always
  type: list
cpuset_cpus:
  description: The CPUs of those nodes as a cpulist (e.g. C(0-31,64-95)); empty when unknown.
  returned: always
  type: str
cpuset_mems:
  description: Those nodes as a list for cpuset.mems (e.g. C(0,1)); empty when unknown.
  returned: always
  type: str
cpu_count:
  description: How many CPUs C(cpuset_cpus) holds.
  returned: always
  type: int
reason:
  description: Why no cpuset could be computed (empty when one was).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_numa import read_placement  # glm5svc/hostfacts/gpu_numa.py


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "gpu_bdfs": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    found = read_placement(module.params["sysfs_root"], module.params["gpu_bdfs"])
    found.pop("node_cpus")  # glm5svc's preflight uses it; the role needs only the cpuset
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
