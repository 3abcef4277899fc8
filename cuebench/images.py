"""Image files as every stage reads them: decoding with named errors, and serving without metadata.

Decoding lives in the contract because builders, runners and models all read the same
stimulus files and must fail the same way on a bad one. ``strip_metadata`` keeps only the
chunks (PNG) or segments (JPEG) that draw the picture, so a file a participant receives
cannot tell the class, condition or the researcher's paths (issue 26, "images do not tell
the answer"), also for folders built before provenance moved out of the PNG.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import CuebenchError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


class CorruptImageError(CuebenchError):
    """An image file cannot be decoded; ``reason`` says why without the file's path, for records
    that travel with the experiment folder."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message

    def __reduce__(self):  # keeps the reason when a worker process sends the error back
        return type(self), (str(self), self.reason)


class ImageTooLargeError(CorruptImageError):
    """An image's header claims more pixels than Pillow's decompression-bomb limit allows."""


def decode_image(path: str | Path) -> np.ndarray:
    """Decode an image file to an RGB uint8 array, or raise CorruptImageError naming the file."""
    path = Path(path)
    try:
        with Image.open(path) as im:
            im.load()
            return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()
    except Image.DecompressionBombError as err:
        raise ImageTooLargeError(f"refusing image {path}: {err}", _reason(path, "refusing", err)) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise CorruptImageError(f"cannot decode image {path}: {err}", _reason(path, "cannot decode", err)) from None


def _reason(path: Path, what: str, err: Exception) -> str:
    """Why, naming the file by its name only: the reason goes into records others may read."""
    return f"{what} {path.name}: {str(err).replace(str(path), path.name)}"


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_PICTURE_CHUNKS = {b"IHDR", b"PLTE", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"IDAT", b"IEND"}
"""What a PNG needs to be drawn as built: header, palette, transparency, colour space, pixels."""
JPEG_KEPT_MARKERS = {0xE0, 0xEE}
"""APP0 (JFIF) and APP14 (Adobe colour transform) change how pixels decode; every other
APPn (EXIF, XMP, IPTC, ICC) and COM segment is metadata."""


def strip_metadata(data: bytes) -> bytes:
    """The file with every metadata chunk/segment removed (PNG, JPEG), and nothing after its end
    (PNG's IEND, JPEG's EOI), where a file can carry anything unseen by a viewer; other formats
    unchanged. Linear in the file's size."""
    if data.startswith(PNG_SIGNATURE):
        return _strip_png(data)
    if data.startswith(b"\xff\xd8"):
        return _strip_jpeg(data)
    return data


def _strip_png(data: bytes) -> bytes:
    out, pos = [PNG_SIGNATURE], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if kind in PNG_PICTURE_CHUNKS:
            out.append(data[pos:end])
        if kind == b"IEND":
            break
        pos = end
    return b"".join(out)


JPEG_EOI = b"\xff\xd9"
JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}
"""Markers without a length: TEM and the restart markers RST0-7."""


def _strip_jpeg(data: bytes) -> bytes:
    """Segment by segment (ITU T.81, B.1): the picture's segments and each scan's entropy-coded
    data are kept, APPn and COM segments dropped wherever they stand (a progressive file has
    several scans, with segments between them), and reading stops at EOI."""
    out, pos = [data[:2]], 2
    while pos + 2 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before a marker
            pos += 1
            continue
        if marker == 0xD9:
            break
        if marker in JPEG_STANDALONE:
            out.append(data[pos:pos + 2])
            pos += 2
            continue
        if pos + 4 > len(data):
            break
        end = pos + 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if marker == 0xDA:  # start of scan: its header, then entropy-coded data up to the next marker
            end = _scan_end(data, end)
            out.append(data[pos:end])
        elif not (0xE0 <= marker <= 0xEF or marker == 0xFE) or marker in JPEG_KEPT_MARKERS:
            out.append(data[pos:end])
        pos = end
    out.append(JPEG_EOI)
    return b"".join(out)


def _scan_end(data: bytes, pos: int) -> int:
    """Where the entropy-coded data from ``pos`` ends: at the first marker other than a stuffed
    0xFF00 or a restart marker (or at the end of the file)."""
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            return len(data)
        following = data[pos + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7:
            pos += 2
        elif following == 0xFF:
            pos += 1
        else:
            return pos
