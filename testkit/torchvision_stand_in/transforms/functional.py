"""sglang's multimodal utilities import InterpolationMode from here."""

from torchvision.transforms import InterpolationMode  # noqa: F401


def __getattr__(name):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"stand-in torchvision: transforms.functional.{name}")

    return unavailable
