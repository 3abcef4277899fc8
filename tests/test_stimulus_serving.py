"""Stimuli as a participant receives them from a real waitress server: pixels and nothing else,
and no file outside the experiment folder, also for folders built before provenance left the PNGs;
a stimulus that is missing never fails silently (refused at start, logged once, the participant told)."""

from __future__ import annotations

import io
import json
import logging
import re
import struct
import threading
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from cuebench.expdir import ExperimentDir
from cuebench_app.cli import main
from experiment_server.app import create_app
from experiment_server.simulate import NONCE
from experiment_server.study import ServerSetupError
from stimuli.web_sample import build_sample_experiment

PICTURE_CHUNKS = {b"IHDR", b"PLTE", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"IDAT", b"IEND"}


def chunk_types(data: bytes) -> list[bytes]:
    """Every chunk type of a PNG, read by the specification (length, type, data, CRC-32), CRCs checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    kinds, pos = [], 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body)
        kinds.append(kind)
        pos += 12 + length
    return kinds


def old_style_png(pixels: np.ndarray) -> bytes:
    """A stimulus as builds before this change wrote it: provenance (the answer) in a text chunk."""
    info = PngImagePlugin.PngInfo()
    info.add_text("cuebench", json.dumps({"source_image": "cat/cat_good", "source_origin": "/home/researcher/cat.png",
                                          "transform": "patch_shuffle"}))
    info.add_itxt("Comment", "category: cat")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


@pytest.fixture()
def served(tmp_path):
    from waitress.server import create_server

    root = tmp_path / "exp"
    build_sample_experiment(root)
    expdir = ExperimentDir(root)
    experiment = expdir.load()
    first = next(iter(experiment.stimuli.values()))
    old = expdir.stimulus_path(first)
    pixels = np.asarray(Image.open(old).convert("RGB"))
    old.write_bytes(old_style_png(pixels))
    secret = tmp_path / "secret.png"
    secret.write_bytes(old_style_png(pixels))
    (root / "stimuli" / "link.png").symlink_to(secret)
    app = create_app(root)
    server = create_server(app, host="127.0.0.1", port=0, threads=2)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}", experiment, first, pixels
    server.close()
    thread.join(timeout=10)


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def test_every_served_stimulus_carries_pixels_only(served):
    base, experiment, old_stimulus, pixels = served
    assert experiment.stimuli
    for stim in experiment.stimuli.values():
        status, data = fetch(f"{base}/{stim.path}")
        assert status == 200, stim.path
        kinds = chunk_types(data)
        assert set(kinds) <= PICTURE_CHUNKS and kinds[0] == b"IHDR" and kinds[-1] == b"IEND", (stim.path, kinds)
        assert b"cuebench" not in data and b"cat_good" not in data
    status, data = fetch(f"{base}/{old_stimulus.path}")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), pixels)  # same picture


def test_symlinks_and_paths_out_of_the_folder_are_not_served(served):
    base = served[0]
    assert fetch(f"{base}/stimuli/link.png")[0] == 404
    assert fetch(f"{base}/stimuli/..%2f..%2fsecret.png")[0] == 404
    assert fetch(f"{base}/stimuli/missing.png")[0] == 404


def test_runners_do_not_read_a_stimulus_through_a_symlink_out_of_the_folder(tmp_path):
    from cuebench.expdir import OutsideExperimentError

    root = tmp_path / "exp"
    build_sample_experiment(root)
    expdir = ExperimentDir(root)
    stim = next(iter(expdir.load().stimuli.values()))
    outside = tmp_path / "elsewhere.png"
    expdir.stimulus_path(stim).rename(outside)
    expdir.stimulus_path(stim).symlink_to(outside)
    with pytest.raises(OutsideExperimentError, match="leads outside the experiment directory"):
        expdir.stimulus_path(stim)


def test_serve_refuses_to_start_when_stimulus_files_are_missing(tmp_path, capsys):
    root = tmp_path / "exp"
    experiment = build_sample_experiment(root)
    gone = sorted(s.path for s in experiment.stimuli.values())[:2]
    for path in gone:
        (root / path).unlink()
    with pytest.raises(ServerSetupError, match=rf"2 of the {len(experiment.stimuli)} stimulus files .* missing"):
        create_app(root)
    assert main(["serve", str(root), "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and gone[0] in err and "copy the whole experiment folder" in err


def test_a_stimulus_deleted_while_serving_is_logged_once(tmp_path, caplog):
    root = tmp_path / "exp"
    experiment = build_sample_experiment(root)
    client = create_app(root).test_client()
    stimulus = next(iter(experiment.stimuli.values())).path
    (root / stimulus).unlink()
    with caplog.at_level(logging.ERROR, logger="cuebench.serve"):
        assert [client.get(f"/{stimulus}").status_code for _ in range(3)] == [404] * 3
        assert client.get("/stimuli/not-a-stimulus.png").status_code == 404  # probing is not logged
    assert [r.getMessage() for r in caplog.records] == [
        f"stimulus {stimulus} cannot be served (FileNotFoundError): answered 404; participants who need it cannot go on"]


@pytest.mark.slow
def test_the_participant_is_told_when_an_image_cannot_be_loaded(tmp_path, browser, caplog):
    """The web task (task/images.js) gives up on a 404 at once (and on other failures after bounded retries), tells the
    server, and shows the participant what happened instead of "loading images, retrying..." forever."""
    from waitress.server import create_server

    root = tmp_path / "exp"
    build_sample_experiment(root)
    server = create_server(create_app(root), host="127.0.0.1", port=0, threads=2)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for stimulus in (root / "stimuli").glob("*.png"):
        stimulus.unlink()  # gone after the server's start-up check
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        with caplog.at_level(logging.ERROR, logger="cuebench.serve"):
            page.goto(f"http://127.0.0.1:{server.effective_port}/?code=imageless")
            page.check("#consent")
            page.click("#start")
            for _ in range(3):  # instructions, then the fullscreen screen after the browser check
                page.wait_for_selector("#continue", state="visible", timeout=60_000)
                if page.evaluate("document.body.dataset.state") == "image-failed":
                    break
                page.click("#continue")
            page.wait_for_function("document.body.dataset.state === 'image-failed'", timeout=60_000)
            text = page.inner_text("#screen")
    finally:
        server.close()
        thread.join(timeout=10)
    assert "An image could not be loaded" in text and "contact the researchers" in text
    told = [r.getMessage() for r in caplog.records if "could not load" in r.getMessage()]
    assert len(told) == 1 and re.search(r"participant P\w+ could not load stimuli/\w+\.png \(last HTTP status 404\); "
                                        r"the file is missing", told[0]), told
