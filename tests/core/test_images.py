"""The contract's image reading: named errors for undecodable and oversized files, and metadata stripping
that keeps the picture (checked by decoding with Pillow, which the stripping code does not use)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from cuebench.errors import CuebenchError
from cuebench.images import CorruptImageError, ImageTooLargeError, decode_image, strip_metadata


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_claiming(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` pixels, with one empty IDAT (a decompression bomb's header)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_a_decompression_bomb_is_a_named_cuebench_error(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header_claiming(60000, 60000))
    with pytest.raises(ImageTooLargeError, match="bomb.png") as info:
        decode_image(path)
    assert isinstance(info.value, CuebenchError) and str(tmp_path) not in info.value.reason


def test_an_undecodable_file_names_itself_and_its_reason_has_no_path(tmp_path):
    path = tmp_path / "broken.jpg"
    path.write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(CorruptImageError, match="broken.jpg") as info:
        decode_image(path)
    assert str(tmp_path) not in info.value.reason


def test_stripping_keeps_the_pixels_and_drops_every_text_and_exif(photos):
    pixels = photos["chelsea"][:64, :80]
    exif = Image.Exif()
    exif[0x010E] = "cat/cat_good"  # ImageDescription
    png, jpeg = io.BytesIO(), io.BytesIO()
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("cuebench", '{"source_image": "cat/cat_good"}')
    info.add_itxt("Comment", "cat")
    Image.fromarray(pixels).save(png, format="PNG", pnginfo=info, exif=exif)
    Image.fromarray(pixels).save(jpeg, format="JPEG", exif=exif, comment=b"cat", quality=95)
    for data in (png.getvalue(), jpeg.getvalue()):
        assert b"cat_good" in data
        clean = strip_metadata(data)
        assert b"cat_good" not in clean and b"cuebench" not in clean
        with Image.open(io.BytesIO(data)) as before, Image.open(io.BytesIO(clean)) as after:
            assert np.array_equal(np.asarray(before.convert("RGB")), np.asarray(after.convert("RGB")))
            assert not after.getexif() and "comment" not in after.info and not getattr(after, "text", {})


HIDDEN = b"HIDDEN-NOTE"


def pixels_of(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGBA"))


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg(pixels: np.ndarray, mode: str = "RGB", **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def numbered_components(data: bytes) -> bytes:
    """A baseline JPEG with its three components' ids (in SOF0 and SOS) made 1, 2, 3, as YCbCr files have."""
    out = bytearray(data)
    frame, scan = data.index(b"\xff\xc0"), data.index(b"\xff\xda")
    for k in range(3):
        out[frame + 10 + 3 * k] = out[scan + 5 + 2 * k] = k + 1
    return bytes(out)


def test_a_jpeg_keeps_only_the_segments_that_draw_it_and_its_colours(photos):
    """JFIF (with bytes where a thumbnail goes), Adobe (with bytes beyond its fields), JPGn and COM
    segments and bytes after EOI are gone, and the pixels are Pillow's for the file: a YCbCr file,
    RGB ones (told by their component ids R, G, B, or, with ids 1, 2, 3, only by the Adobe segment's
    transform 0, so a bare Adobe segment stays) and a CMYK one (four components are CMYK without it)."""
    pixels = photos["chelsea"][:48, :64]
    rgb = jpeg(pixels, keep_rgb=True)
    for name, clean, transform_kept in (("YCbCr", jpeg(pixels), None), ("RGB", rgb, None),
                                         ("RGB, ids 1 2 3", numbered_components(rgb), 0),
                                         ("CMYK", jpeg(pixels, "CMYK"), None)):
        with Image.open(io.BytesIO(clean)) as im:
            transform = im.info.get("adobe_transform", 1)
            jfif = segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + HIDDEN) if "jfif" in im.info else b""
        crafted = (clean[:2] + jfif + segment(0xFE, HIDDEN)
                   + segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00" + bytes([transform]) + HIDDEN) + clean[2:] + HIDDEN)
        assert np.array_equal(pixels_of(crafted), pixels_of(clean)), name
        stripped = strip_metadata(crafted[:2] + segment(0xF5, HIDDEN) + crafted[2:])  # JPGn: libjpeg refuses it
        assert HIDDEN not in stripped and b"JFIF" not in stripped, name
        assert np.array_equal(pixels_of(stripped), pixels_of(clean)), name
        with Image.open(io.BytesIO(stripped)) as im:
            assert im.info.get("adobe_transform") == transform_kept, name


def png(pixels: np.ndarray, *chunks: bytes, stream: bytes | None = None, colour: int = 2, interlaced: int = 0) -> bytes:
    """A PNG of 8-bit ``pixels`` written by hand (filter 0), ``chunks`` before its pixels' IDAT."""
    height, width = pixels.shape[:2]
    if stream is None:
        stream = zlib.compress(scanlines(pixels, interlaced))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, interlaced))
            + b"".join(chunks) + chunk(b"IDAT", stream) + chunk(b"IEND", b""))


def scanlines(pixels: np.ndarray, interlaced: int = 0) -> bytes:
    """Rows with filter byte 0; Adam7's seven passes (PNG spec 8.2) when ``interlaced``."""
    passes = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)) \
        if interlaced else ((0, 0, 1, 1),)
    return b"".join(b"\x00" + row.tobytes() for x0, y0, dx, dy in passes for row in pixels[y0::dy, x0::dx]
                    if row.size)


def test_a_png_keeps_only_its_picture_chunks_and_its_pixel_stream(photos):
    """Bytes after the zlib stream in IDAT, more scanline bytes in it than the picture has, chunks
    of the wrong size and a tRNS on an image with alpha are gone; the pixels (interlaced or not) are
    Pillow's for the original, and a file with nothing to drop is served as it is."""
    rgb = np.ascontiguousarray(photos["chelsea"][:13, :21])
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 200, np.uint8)])
    cases = []
    for interlaced in (0, 1):
        clean = png(rgb, chunk(b"gAMA", struct.pack(">I", 45455)), interlaced=interlaced)
        assert strip_metadata(clean) == clean
        stream = zlib.compress(scanlines(rgb, interlaced))
        cases += [(clean, png(rgb, chunk(b"gAMA", struct.pack(">I", 45455)), interlaced=interlaced,
                              stream=stream + HIDDEN)),
                  (clean, png(rgb, chunk(b"gAMA", struct.pack(">I", 45455)), interlaced=interlaced,
                              stream=zlib.compress(scanlines(rgb, interlaced) + HIDDEN)))]
    cases.append((png(rgb), png(rgb, chunk(b"sRGB", b"\x00" + HIDDEN), chunk(b"tEXt", b"note\x00" + HIDDEN))))
    cases.append((png(rgba, colour=6), png(rgba, chunk(b"tRNS", HIDDEN), colour=6)))
    for clean, crafted in cases:
        stripped = strip_metadata(crafted)
        assert HIDDEN not in stripped and HIDDEN not in zlib.decompress(stripped[stripped.index(b"IDAT") + 4:])
        assert np.array_equal(pixels_of(stripped), pixels_of(clean))
