"""`glm5svc tune`: a search over the server's settings, decided on measured differences."""
