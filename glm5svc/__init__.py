"""glm5svc: launch, supervise, benchmark and observe SGLang serving GLM-5-NVFP4."""

__version__ = "0.1.0"
