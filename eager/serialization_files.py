"""What eager.load's readers share: their errors, and reading a zip's members under caps.

kiln's own files and PyTorch's zip files are both zips of stored members; `Members` reads
them for either, refusing before it reads a byte any member whose size in the zip directory
is not what the reader expects or is more than the file holds.
"""
from __future__ import annotations

import pickle
import struct
import zipfile
import zlib

import numpy as np


class CorruptFileError(RuntimeError):
    """eager.load cannot read this file: it is damaged, it is no save file, or it holds
    what kiln lacks (a dtype, sparse tensors); the message names the problem."""


class WeightsOnlyError(CorruptFileError, pickle.UnpicklingError):
    """A PyTorch file's pickle asks for a global or an opcode outside the rules of
    torch.load(weights_only=True); the message names it. kiln never runs such a pickle
    (an UnpicklingError, as PyTorch raises, and a CorruptFileError, as every refusal of
    eager.load is)."""


# What a damaged or crafted file can make zipfile, json, numpy or a reader raise.
DAMAGE = (zipfile.BadZipFile, zlib.error, struct.error, EOFError, OSError, ValueError,
          KeyError, IndexError, TypeError, AttributeError, NotImplementedError, RuntimeError)

_CHUNK = 1 << 20  # bytes: a storage is read into its own memory a MiB at a time


class Members:
    """Reads a zip's members, each once, refusing before reading any whose size in the zip
    directory is not what the caller expects or is more than the file holds (a deflated
    member could inflate a thousandfold; a stored one cannot). A zip that names one member
    twice is refused whole: which of the two a reader takes is the reader's choice."""

    def __init__(self, z: zipfile.ZipFile, name: str, file_size: int):
        self.z, self.name, self.file_size, self.seen = z, name, file_size, set()
        names = z.namelist()
        if len(set(names)) != len(names):
            twice = next(n for i, n in enumerate(names) if n in names[:i])
            raise self.refuse(f"the zip directory names member {twice} twice")

    def read(self, member: str, least: int, most: int, expected: str,
             entry: str | None = None) -> bytes:
        """The member's bytes, refused unless its size is in [least, most] (`expected`
        says why, in the error; `entry` names what asked for it)."""
        info = self._checked(member, least, most, expected, entry)
        with self.z.open(info) as fh:
            return fh.read(info.file_size)  # zipfile checks the CRC on reaching the end

    def read_into(self, member: str, out: np.ndarray, expected: str,
                  entry: str | None = None) -> None:
        """Fill `out` (1-D, contiguous) with the member's bytes, refused unless the member
        holds exactly out.nbytes: a storage is read straight into its tensors' memory."""
        info = self._checked(member, out.nbytes, out.nbytes, expected, entry)
        view = memoryview(out).cast("B")
        with self.z.open(info) as fh:
            done = 0
            while done < out.nbytes:
                chunk = fh.read(min(_CHUNK, out.nbytes - done))
                if not chunk:
                    raise self.refuse(f"member {member} ends after {done} bytes", entry)
                view[done:done + len(chunk)] = chunk
                done += len(chunk)
            fh.read()  # at the end: zipfile checks the CRC (an empty member's too)

    def _checked(self, member: str, least: int, most: int, expected: str,
                 entry: str | None) -> zipfile.ZipInfo:
        if member in self.seen:
            raise self.refuse(f"names member {member} twice", entry)
        self.seen.add(member)
        info = self.z.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            raise self.refuse(f"member {member} is compressed (method "
                              f"{info.compress_type}); save files store members "
                              f"uncompressed", entry)
        if not least <= info.file_size <= most:
            raise self.refuse(f"member {member} holds {info.file_size} bytes; {expected}",
                              entry)
        if info.compress_size != info.file_size or \
                info.header_offset + info.compress_size > self.file_size:
            raise self.refuse(f"member {member} claims {info.compress_size} bytes stored "
                              f"but the file has only {self.file_size}", entry)
        return info

    def holds(self, member: str) -> bool:
        try:
            self.z.getinfo(member)
        except KeyError:
            return False
        return True

    def refuse(self, why: str, entry: str | None = None) -> CorruptFileError:
        """The error for this file, saying `why` (and which `entry` it was)."""
        where = "" if entry is None else f"{entry}: "
        return CorruptFileError(f"eager.load: {self.name} is corrupted ({where}{why})")
