"""Image files as every stage reads them: decoding with named errors, and serving without metadata.

Decoding lives in the contract because builders, runners and models all read the same
stimulus files and must fail the same way on a bad one. ``strip_metadata`` keeps only the
chunks (PNG) or segments (JPEG) that draw the picture, so a file a participant receives
cannot tell the class, condition or the researcher's paths (issue 26, "images do not tell
the answer"), also for folders built before provenance moved out of the PNG.
"""

from __future__ import annotations

import functools
import struct
import zlib
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
"""What a PNG needs to be drawn as built: the critical chunks (header, palette, pixels, end), and
transparency and colour space, which change what is shown."""
PNG_CHUNK_LENGTHS = {b"IHDR": 13, b"gAMA": 4, b"cHRM": 32, b"sRGB": 1}
"""Chunks of one size (PNG spec, 11.2-11.3): one of another size carries something else, and goes."""
PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
"""Samples per pixel by IHDR colour type."""
PNG_TRNS_LENGTHS = {0: 2, 2: 6, 3: 256}
"""The longest tRNS by colour type (a palette's: one byte per palette entry at most); none with alpha."""
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
"""Interlace passes: (first column, first row, column step, row step), PNG spec 8.2."""


def strip_metadata(data: bytes) -> bytes:
    """The file with only what draws its picture (PNG, JPEG), and nothing after its end (PNG's
    IEND, JPEG's EOI) or after its compressed pixels, where a file can carry anything unseen by
    a viewer; other formats unchanged. Linear in the file's size."""
    if data.startswith(PNG_SIGNATURE):
        return _strip_png(data)
    if data.startswith(b"\xff\xd8"):
        return _strip_jpeg(data)
    return data


@functools.lru_cache(maxsize=256)
def _stripped_file(path: str, mtime_ns: int, size: int) -> bytes:
    return strip_metadata(Path(path).read_bytes())


def stripped_file(path: str | Path) -> bytes:
    """The file at ``path`` through ``strip_metadata``, kept while its size and modification time stay: a
    server sends the same stimuli over and over, and finding a PNG's pixel stream means inflating it
    (about 1 ms for a 224 x 224 picture). OSError as reading the file raises it."""
    stat = Path(path).stat()
    return _stripped_file(str(path), stat.st_mtime_ns, stat.st_size)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", len(payload), kind) + payload + struct.pack(">I", zlib.crc32(kind + payload))


def _strip_png(data: bytes) -> bytes:
    """Chunk by chunk: the picture's chunks of their proper sizes, the pixels as one IDAT holding
    exactly their zlib stream, and that stream holding exactly the image's scanlines (PNG spec,
    10.1: bytes after the stream, or surplus scanline bytes, are data no viewer shows)."""
    chunks, pos = [], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind in PNG_PICTURE_CHUNKS:
            chunks.append((kind, data[pos + 8:pos + 8 + length]))
        if kind == b"IEND":
            break
        pos += 12 + length
    header = next((payload for kind, payload in chunks if kind == b"IHDR"), b"")
    if len(header) != 13:
        return PNG_SIGNATURE + b"".join(_png_chunk(kind, payload) for kind, payload in chunks)
    width, height, depth, colour, _, _, interlaced = struct.unpack(">IIBBBBB", header)
    pixels = _png_pixel_stream(b"".join(payload for kind, payload in chunks if kind == b"IDAT"),
                               _png_scanline_bytes(width, height, depth * PNG_CHANNELS.get(colour, 4), interlaced))
    out, pixels_written = [PNG_SIGNATURE], False
    for kind, payload in chunks:
        if kind == b"IDAT":
            if not pixels_written:
                out.append(_png_chunk(b"IDAT", pixels))
                pixels_written = True
        elif kind == b"tRNS":
            if colour in PNG_TRNS_LENGTHS:
                out.append(_png_chunk(kind, payload[:PNG_TRNS_LENGTHS[colour]]))
        elif kind == b"PLTE":
            out.append(_png_chunk(kind, payload[:min(768, len(payload) - len(payload) % 3)]))
        elif PNG_CHUNK_LENGTHS.get(kind, len(payload)) == len(payload):
            out.append(_png_chunk(kind, payload))
    return b"".join(out)


def _png_scanline_bytes(width: int, height: int, bits_per_pixel: int, interlaced: int) -> int:
    """How many bytes the decompressed pixels of an image take: a filter byte and the packed samples
    per row (of each interlace pass)."""
    passes = ADAM7 if interlaced else ((0, 0, 1, 1),)
    total = 0
    for x0, y0, dx, dy in passes:
        columns, rows = -(-(width - x0) // dx) if width > x0 else 0, -(-(height - y0) // dy) if height > y0 else 0
        if columns and rows:
            total += rows * (1 + -(-columns * bits_per_pixel // 8))
    return total


def _png_pixel_stream(compressed: bytes, needed: int) -> bytes:
    """``compressed`` without bytes after its zlib stream, compressed again only if the stream holds
    more than the ``needed`` scanline bytes; a broken stream is left for the decoder to refuse."""
    stream = zlib.decompressobj()
    try:
        scanlines = stream.decompress(compressed, needed + 1)
    except zlib.error:
        return compressed
    if len(scanlines) > needed:
        return zlib.compress(scanlines[:needed], 9)
    return compressed[:len(compressed) - len(stream.unused_data)] if stream.eof else compressed


JPEG_EOI = b"\xff\xd9"
JPEG_PICTURE_MARKERS = {*range(0xC0, 0xC8), *range(0xC9, 0xD0), *range(0xDA, 0xE0)}
"""The segments that draw a JPEG (ITU T.81, table B.1): frame headers SOFn, Huffman and arithmetic
tables (DHT, DAC), quantisation tables (DQT), scans (SOS), restart interval (DRI), line count (DNL),
hierarchical frames (DHP, EXP). Every APPn (JFIF, EXIF, XMP, ICC, Adobe), JPGn and COM goes."""
JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}
"""Markers without a length: TEM and the restart markers RST0-7."""
_JPEG_TRANSFORMS = {(3, 0): "RGB", (3, 1): "YCbCr", (4, 0): "CMYK", (4, 2): "YCCK"}
"""(components, Adobe transform flag) -> colour space."""


def _jpeg_colour_space(components: int, ids: bytes, jfif: bool, adobe: int | None) -> str:
    """The colour space a decoder reads a frame's samples in (libjpeg, ``default_decompress_parms``):
    JFIF means YCbCr; else an Adobe APP14 transform flag decides; else the component ids do (R, G, B
    is RGB) for three components, and four are CMYK."""
    if components == 3:
        if jfif:
            return "YCbCr"
        if adobe is not None:
            return "RGB" if adobe == 0 else "YCbCr"
        return "RGB" if ids == b"RGB" else "YCbCr"
    if components == 4:
        return "YCCK" if adobe not in (None, 0) else "CMYK"
    return "grey"


def _adobe_segment(space: str, components: int) -> bytes:
    """A bare Adobe APP14 segment (Adobe TN 5116) that only names the colour transform."""
    transform = next(flag for (n, flag), name in _JPEG_TRANSFORMS.items() if n == components and name == space)
    return b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00" + bytes([transform])


def _strip_jpeg(data: bytes) -> bytes:
    """Segment by segment (ITU T.81, B.1): the picture's segments and each scan's entropy-coded
    data are kept, every other segment dropped wherever it stands (a progressive file has
    several scans, with segments between them), and reading stops at EOI. JFIF (APP0) and Adobe
    (APP14) segments can decide the colour space of the samples; where leaving them out would
    change it, a bare Adobe segment that says only that takes their place."""
    out, pos = [data[:2]], 2
    jfif, adobe, frame = False, None, None
    while pos + 2 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before a marker
            pos += 1
            continue
        if marker == 0xD9:
            break
        if marker in JPEG_STANDALONE:
            pos += 2
            continue
        if pos + 4 > len(data):
            break
        end = pos + 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
        segment = data[pos:end]
        if marker == 0xDA:  # start of scan: its header, then entropy-coded data up to the next marker
            end = _scan_end(data, end)
            out.append(data[pos:end])
        elif marker in JPEG_PICTURE_MARKERS:
            out.append(segment)
            if frame is None and marker not in (0xC4, 0xCC) and marker < 0xD0 and len(segment) >= 10:
                frame = (segment[9], segment[10:10 + 3 * segment[9]:3])
        elif marker == 0xE0 and segment[4:9] == b"JFIF\x00":
            jfif = True
        elif marker == 0xEE and segment[4:9] == b"Adobe" and len(segment) >= 16:
            adobe = segment[15]
        pos = end
    if frame is not None:
        components, ids = frame
        space = _jpeg_colour_space(components, ids, jfif, adobe)
        if space != _jpeg_colour_space(components, ids, False, None):
            out.insert(1, _adobe_segment(space, components))
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
