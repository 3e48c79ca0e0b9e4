"""Messages between a process and its compile workers: each pickled, its length in front."""
from __future__ import annotations

import pickle
import struct

LENGTH = struct.Struct("<Q")


def send(stream, message) -> None:
    """Write `message` pickled with its length in front, and flush."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(LENGTH.pack(len(data)) + data)
    stream.flush()


def receive(stream):
    """The next message from `stream` (buffered, or raw: reads that return less are
    repeated), or None at its end (a message cut short counts as the end: the writer
    died)."""
    head = _read_exactly(stream, LENGTH.size)
    if head is None:
        return None
    size, = LENGTH.unpack(head)
    data = _read_exactly(stream, size)
    return None if data is None else pickle.loads(data)


def _read_exactly(stream, size: int) -> bytes | None:
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
