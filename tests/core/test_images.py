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


def png_header_claiming(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` pixels, with one empty IDAT (a decompression bomb's header)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

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
