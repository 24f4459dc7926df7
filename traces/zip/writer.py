"""A zip archive written from members deflated beforehand (PKWARE APPNOTE 6.3.9).

The traces zip is assembled from seed documents deflated once and kept (`traces.zip.members`), so
its writer must take compressed bytes as they are: the libraries at hand (zipfile, stream-zip)
compress what they are given. Zip64 records are written where the counts or offsets need them
(over 65,535 members or 4 GiB), so a 100,000-seed job's archive opens everywhere. The central
directory goes to a temporary file as members are written: memory stays flat whatever their
number.
"""

from __future__ import annotations

import stat
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_END64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_EXTRA64 = 0x0001
_UTF8_NAME = 0x0800
_DEFLATE = 8
_VERSION, _VERSION64 = 20, 45
_MADE_BY_UNIX = 3 << 8
_MAX32, _MAX16 = 0xFFFFFFFF, 0xFFFF
_FILE_ATTRS = (stat.S_IFREG | 0o644) << 16
_READ_BYTES = 256 * 1024


class Deflated(NamedTuple):
    """A member's data, deflated (raw deflate, as a zip holds it)."""

    crc: int
    size: int
    data: bytes


def deflate(data: bytes, level: int) -> Deflated:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    return Deflated(zlib.crc32(data), len(data), compressor.compress(data) + compressor.flush())


class Deflating:
    """A member deflated as its bytes are written (the same bytes `deflate` makes of them)."""

    def __init__(self, level: int):
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._parts: list[bytes] = []
        self.crc = self.size = 0

    def write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        self._parts.append(self._compressor.compress(data))

    def done(self) -> Deflated:
        self._parts.append(self._compressor.flush())
        return Deflated(self.crc, self.size, b"".join(self._parts))


def _dos_time(at: datetime) -> tuple[int, int]:
    if at.year < 1980:
        return 0, (1 << 5) | 1  # 1980-01-01, the format's first day
    return (
        (at.hour << 11) | (at.minute << 5) | (at.second // 2),
        ((min(at.year, 2107) - 1980) << 9) | (at.month << 5) | at.day,
    )


class ZipWriter:
    """Yields the bytes of an archive member by member; `end()` yields the central directory
    and the end records. Names are UTF-8; every member is a regular file, mode 0644."""

    def __init__(self) -> None:
        self.offset = 0
        self.count = 0
        self._directory = tempfile.TemporaryFile()

    def member(self, name: str, modified_at: datetime, deflated: Deflated) -> bytes:
        """A member whose data is in memory."""
        head = self._local_header(
            name, modified_at, deflated.crc, deflated.size, len(deflated.data)
        )
        self.offset += len(head) + len(deflated.data)
        return head + deflated.data

    def member_chunks(
        self, name: str, modified_at: datetime, crc: int, size: int, compressed_size: int,
        chunks: Iterable[bytes],
    ) -> Iterator[bytes]:  # fmt: skip
        """A member whose deflated data comes in `chunks` (`compressed_size` bytes in all)."""
        head = self._local_header(name, modified_at, crc, size, compressed_size)
        self.offset += len(head)
        yield head
        for chunk in chunks:
            self.offset += len(chunk)
            yield chunk

    def _local_header(
        self, name: str, modified_at: datetime, crc: int, size: int, compressed_size: int
    ) -> bytes:
        encoded = name.encode()
        time, date = _dos_time(modified_at)
        big = size >= _MAX32 or compressed_size >= _MAX32
        extra = struct.pack("<HHQQ", _EXTRA64, 16, size, compressed_size) if big else b""
        version = _VERSION64 if big or self.offset >= _MAX32 else _VERSION
        sizes = (_MAX32, _MAX32) if big else (compressed_size, size)
        self._record(encoded, version, time, date, crc, size, compressed_size)
        fields = (version, _UTF8_NAME, _DEFLATE, time, date, crc, *sizes, len(encoded), len(extra))
        return _LOCAL.pack(0x04034B50, *fields) + encoded + extra

    def _record(
        self, name: bytes, version: int, time: int, date: int, crc: int, size: int,
        compressed_size: int,
    ) -> None:  # fmt: skip
        """The member's central directory entry, with the zip64 fields it needs, in order."""
        wide = [n for n in (size, compressed_size, self.offset) if n >= _MAX32]
        extra = struct.pack(f"<HH{len(wide)}Q", _EXTRA64, 8 * len(wide), *wide) if wide else b""
        sizes = (min(compressed_size, _MAX32), min(size, _MAX32))
        fields = (_MADE_BY_UNIX | version, version, _UTF8_NAME, _DEFLATE, time, date, crc, *sizes,
                  len(name), len(extra), 0, 0, 0, _FILE_ATTRS, min(self.offset, _MAX32))  # fmt: skip
        self._directory.write(_CENTRAL.pack(0x02014B50, *fields) + name + extra)
        self.count += 1

    def end(self) -> Iterator[bytes]:
        """The central directory, then the end records (zip64 ones first when needed)."""
        start, size = self.offset, self._directory.tell()
        self._directory.seek(0)
        while chunk := self._directory.read(_READ_BYTES):
            yield chunk
        self._directory.close()
        end = start + size
        if self.count >= _MAX16 or start >= _MAX32 or size >= _MAX32:
            yield _END64.pack(0x06064B50, 44, _MADE_BY_UNIX | _VERSION64, _VERSION64, 0, 0,
                              self.count, self.count, size, start)  # fmt: skip
            yield _LOCATOR64.pack(0x07064B50, 0, end, 1)
        count = min(self.count, _MAX16)
        yield _END.pack(0x06054B50, 0, 0, count, count, min(size, _MAX32), min(start, _MAX32), 0)
