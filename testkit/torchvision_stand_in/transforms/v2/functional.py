"""transformers imports this module as tvF; nothing in the parser test calls it."""


def __getattr__(name):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"stand-in torchvision: transforms.v2.functional.{name}")

    return unavailable
