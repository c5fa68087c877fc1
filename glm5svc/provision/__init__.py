"""`glm5svc provision`: run site.yml through ansible-runner with a live view and a summary."""
