"""Sub-commands of the glm5svc CLI, one module each."""
