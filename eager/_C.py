"""PyTorch's private introspection names, for the walkthrough: `_dispatch_dump_table`."""
from eager import dispatcher


def _dispatch_dump(name: str) -> str:
    """The kernels registered for an op, per key (aliases included)."""
    return dispatcher.find(name).dump_registrations()


def _dispatch_dump_table(name: str) -> str:
    """The computed dispatch table: which kernel runs for each runtime key."""
    return dispatcher.find(name).dump_table()
