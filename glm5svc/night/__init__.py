"""`glm5svc night`: one unattended night on the box, from the evening's service to a tuned one
that is no worse, or back to the evening's (docs/operations.md, "One unattended night")."""
