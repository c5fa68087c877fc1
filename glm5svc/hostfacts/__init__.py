"""Facts about a host that glm5svc and the Ansible modules both compute, in one place.

Each module here is standard library only and imports nothing from glm5svc (not even a
sibling), because Ansible ships it to the managed host as a module_utils file:
ansible.cfg sets `module_utils = glm5svc/hostfacts`, so a module in library/ writes
`from ansible.module_utils.gpu_numa import placement` and glm5svc writes
`from glm5svc.hostfacts.gpu_numa import placement`. The rule and the list of facts:
docs/shared-facts.md.
"""
