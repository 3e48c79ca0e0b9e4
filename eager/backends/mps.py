"""torch.backends.mps: Apple's Metal backend, which kiln has not (libraries ask before
choosing a device)."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False


def is_macos_or_newer(major: int, minor: int) -> bool:
    return False
