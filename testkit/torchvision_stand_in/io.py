"""sglang.srt.utils.common imports decode_jpeg at module level; transformers 5.6 (sglang
0.5.11's pin) imports ImageReadMode and decode_image when torchvision is importable."""

import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    RGB = 3


def decode_jpeg(*args, **kwargs):
    raise NotImplementedError("stand-in torchvision in the sglang parser test venv")


def decode_image(*args, **kwargs):
    raise NotImplementedError("stand-in torchvision in the sglang parser test venv")
