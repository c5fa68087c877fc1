"""sglang.srt.utils.common imports decode_jpeg at module level."""


def decode_jpeg(*args, **kwargs):
    raise NotImplementedError("stand-in torchvision in the sglang parser test venv")
