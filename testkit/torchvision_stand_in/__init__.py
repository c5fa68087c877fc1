"""Stand-in torchvision for the CPU-only sglang parser venv (never shipped).

PyPI's torchvision is a CUDA build that fails beside CPU torch; sglang's server_args
only needs the imports below to succeed.
"""

__version__ = "0.0.0+stand-in"
