"""`glm5svc serve`: supervise the SGLang server for systemd, with honest health."""
