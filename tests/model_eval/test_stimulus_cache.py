"""The decoded-stimulus cache: decoded once, read by later runs, extended and re-decoded when stimuli
change, never half-written, shared safely by processes that build it at once; batch preprocessing on
the device matches the per-image Pillow path."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from cuebench.expdir import ExperimentDir
from model_eval import stimulus_cache
from model_eval.batch_loader import batches_on_device, handled_behind
from model_eval.preprocess import DevicePreprocess, Normalise, PreprocessError, ToUint8Tensor
from model_eval.stimulus_cache import cache_dir, decoded_stimuli, read_index
from cuebench.images import CorruptImageError, decode_image

LITE0_CONFIG = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
                "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}


@pytest.fixture
def stimuli(photos, tmp_path):
    """Six stored stimuli of the real photos, in two sizes: id -> file."""
    expdir = ExperimentDir(tmp_path / "exp")
    paths = {}
    for k, (name, pixels) in enumerate(list(photos.items())[:6]):
        image = pixels if k < 4 else np.ascontiguousarray(pixels[:160, :200])
        stim = expdir.write_stimulus(image, {"source_image": name, "transform": "test"})
        paths[stim.id] = expdir.stimulus_path(stim)
    return expdir, paths


def arrays(expdir) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in cache_dir(expdir).glob("*.npy")}


def test_decoded_once_then_read(stimuli, monkeypatch):
    expdir, paths = stimuli
    decoded = decoded_stimuli(expdir, paths, progress=False)
    for sid, path in paths.items():
        assert np.array_equal(decoded.gather([sid])[0], decode_image(path))
    assert {decoded.shape(sid) for sid in paths} == {(224, 224), (160, 200)}
    assert sorted(name.split("-")[0] for name in arrays(expdir)) == ["160x200", "224x224"]
    first = arrays(expdir)
    calls = []
    monkeypatch.setattr(stimulus_cache, "decode_image", lambda path: calls.append(path))
    again = decoded_stimuli(expdir, paths, progress=False)
    assert calls == [] and arrays(expdir) == first
    same_size = [sid for sid in paths if again.shape(sid) == (224, 224)]
    out = np.zeros((8, 224, 224, 3), np.uint8)  # e.g. a pinned buffer
    gathered = again.gather(same_size[::-1], out=out)
    assert np.array_equal(gathered, np.stack([decode_image(paths[sid]) for sid in same_size[::-1]]))


def test_two_experiments_caches_joined_gather_one_mixed_batch(stimuli, photos, tmp_path):
    """Stimuli of two experiments' caches in one batch (``cuebench benchmark``'s shared stream), with and without
    a buffer to gather into: the pixels Pillow decodes from each experiment's own files."""
    expdir, paths = stimuli
    other = ExperimentDir(tmp_path / "other")
    stim = other.write_stimulus(photos["rocket"], {"source_image": "rocket", "transform": "test"})
    other_paths = {stim.id: other.stimulus_path(stim)}
    joined = stimulus_cache.DecodedStimuli.joined([decoded_stimuli(expdir, paths, progress=False),
                                                   decoded_stimuli(other, other_paths, progress=False)])
    first = [sid for sid in paths if joined.shape((0, sid)) == (224, 224)][:2]
    batch = [(0, first[0]), (1, stim.id), (0, first[1])]
    want = np.stack([decode_image(paths[first[0]]), decode_image(other_paths[stim.id]), decode_image(paths[first[1]])])
    assert np.array_equal(joined.gather(batch), want)
    out = np.zeros((4, 224, 224, 3), np.uint8)
    assert np.array_equal(joined.gather(batch, out=out), want) and np.array_equal(out[:3], want)


def test_decoding_processes_fill_the_same_cache_and_start_only_where_they_pay(stimuli):
    """Two decoding processes (what a CPU run of 256 or more new images uses) store the pixels Pillow decodes,
    in both sizes; a few images are decoded in this process."""
    expdir, paths = stimuli
    decoded = decoded_stimuli(expdir, paths, workers=2, progress=False)
    for sid, path in paths.items():
        assert np.array_equal(decoded.gather([sid])[0], decode_image(path))
    assert stimulus_cache.decoding_workers(None, "cpu", len(paths)) == 0
    assert stimulus_cache.decoding_workers(3, "cpu", len(paths)) == 3


def test_batches_gathered_ahead_come_in_order_and_stop_cleanly(stimuli):
    """The prefetching loader yields each batch's pixels (the files as Pillow decodes them) in order, with
    batches of both sizes; a gather that fails surfaces in the consumer; a consumer that stops early leaves no
    gathering thread behind."""
    expdir, paths = stimuli
    decoded = decoded_stimuli(expdir, paths, progress=False)
    by_size = {}
    for sid in paths:
        by_size.setdefault(decoded.shape(sid), []).append(sid)
    batches = [ids[i:i + 3] for ids in by_size.values() for i in range(0, len(ids), 3)]
    got = list(batches_on_device(decoded, batches, "cpu", ahead=1))
    assert [ids for ids, _ in got] == batches
    for ids, pixels in got:
        assert pixels.dtype == torch.uint8
        assert np.array_equal(pixels.numpy(), np.stack([decode_image(paths[sid]) for sid in ids]))

    before = threading.active_count()
    stream = batches_on_device(decoded, batches, "cpu", ahead=1)
    next(stream)
    stream.close()
    assert threading.active_count() == before
    with pytest.raises(KeyError):
        list(batches_on_device(decoded, [batches[0], ["no-such-stimulus"]], "cpu"))


def test_answers_handled_behind_in_order_and_errors_reach_the_caller():
    """Items are handled in the order handed over, all of them before the block ends; a failure of the handler
    is raised in the caller; when the caller's own block fails, what it handed over is still handled, and no
    thread is left behind."""
    before = threading.active_count()
    handled = []
    with handled_behind(handled.append, ahead=2) as hand_over:
        for k in range(20):
            hand_over(k)
    assert handled == list(range(20))

    def refuse(item):
        if item == 3:
            raise ValueError("row 3 is malformed")
        handled.append(item)

    handled.clear()
    with pytest.raises(ValueError, match="row 3"):
        with handled_behind(refuse, ahead=1) as hand_over:
            for k in range(10):
                hand_over(k)
    assert handled == [0, 1, 2]

    handled.clear()
    with pytest.raises(RuntimeError, match="out of memory"):
        with handled_behind(handled.append) as hand_over:
            hand_over("first batch")
            raise RuntimeError("out of memory")
    assert handled == ["first batch"]
    assert threading.active_count() == before


def test_new_and_changed_stimuli_are_decoded_and_the_rest_kept(stimuli, photos):
    expdir, paths = stimuli
    ids = list(paths)
    decoded_stimuli(expdir, {sid: paths[sid] for sid in ids[:3]}, progress=False)
    before = arrays(expdir)
    assert len(before) == 1
    decoded = decoded_stimuli(expdir, {sid: paths[sid] for sid in ids[1:4]}, progress=False)  # one new
    after = arrays(expdir)
    assert len(after) == 1 and set(after) != set(before)  # a new content address; the old file is gone
    assert set(read_index(cache_dir(expdir))) == set(ids[:4])  # the first one is kept for later runs
    assert np.array_equal(decoded.gather([ids[3]])[0], decode_image(paths[ids[3]]))
    changed = np.ascontiguousarray(photos["coffee"][::-1])  # a file overwritten in place
    Image.fromarray(changed).save(paths[ids[1]])
    decoded = decoded_stimuli(expdir, {sid: paths[sid] for sid in ids[:4]}, progress=False)
    assert np.array_equal(decoded.gather([ids[1]])[0], changed)
    assert np.array_equal(decoded.gather([ids[0]])[0], decode_image(paths[ids[0]]))


def test_a_broken_index_is_rebuilt_and_a_failed_build_leaves_nothing(stimuli, tmp_path):
    expdir, paths = stimuli
    decoded_stimuli(expdir, paths, progress=False)
    (cache_dir(expdir) / stimulus_cache.INDEX_FILE).write_text("{not json")
    decoded = decoded_stimuli(expdir, paths, progress=False)
    sid = next(iter(paths))
    assert np.array_equal(decoded.gather([sid])[0], decode_image(paths[sid]))
    index_before = (cache_dir(expdir) / stimulus_cache.INDEX_FILE).read_bytes()
    (cache_dir(expdir) / ".224x224-0123.killed.tmp").write_bytes(b"half an array")  # a killed build's
    broken = expdir.stimuli_dir / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(CorruptImageError, match="broken.png"):
        decoded_stimuli(expdir, {**paths, "broken": broken}, progress=False)
    with pytest.raises(CorruptImageError, match="cannot read stimulus gone"):
        decoded_stimuli(expdir, {"gone": tmp_path / "gone.png"}, progress=False)
    assert (cache_dir(expdir) / stimulus_cache.INDEX_FILE).read_bytes() == index_before
    assert not list(cache_dir(expdir).glob("*.tmp"))


def test_two_processes_building_at_once_share_one_cache(stimuli):
    expdir, paths = stimuli
    script = ("import json, sys; from pathlib import Path; from cuebench.expdir import ExperimentDir; "
              "from model_eval.stimulus_cache import decoded_stimuli; "
              "paths = {k: Path(v) for k, v in json.loads(sys.argv[2]).items()}; "
              "d = decoded_stimuli(ExperimentDir(sys.argv[1]), paths, progress=False); "
              "print(sum(int(d.gather([k]).sum()) for k in paths))")
    argv = [sys.executable, "-c", script, str(expdir.root), json.dumps({k: str(v) for k, v in paths.items()})]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    want = sum(int(decode_image(p).sum()) for p in paths.values())
    assert [int(out) for out in outputs] == [want, want]
    assert len(arrays(expdir)) == 2 and set(read_index(cache_dir(expdir))) == set(paths)


def test_device_preprocessing_matches_the_pillow_path(photos, tmp_path):
    path = tmp_path / "chelsea.png"
    Image.fromarray(photos["chelsea"]).save(path)
    batch = torch.from_numpy(photos["chelsea"])[None]
    as_is = DevicePreprocess(LITE0_CONFIG, "as-is", "cpu")(batch)
    assert torch.equal(as_is, Normalise(LITE0_CONFIG, "cpu")(ToUint8Tensor(LITE0_CONFIG, "as-is")(path)[None]))
    wide = np.ascontiguousarray(np.concatenate([photos["coffee"], photos["rocket"][:, :100]], axis=1))  # 224x324
    Image.fromarray(wide).save(tmp_path / "wide.png")
    configs = [LITE0_CONFIG, {**LITE0_CONFIG, "input_size": (3, 260, 260), "crop_pct": 0.89},
               {**LITE0_CONFIG, "interpolation": "bilinear", "crop_pct": 0.95},
               {**LITE0_CONFIG, "crop_mode": "squash"}]
    for config in configs:
        for file, pixels in ((path, photos["chelsea"]), (tmp_path / "wide.png", wide)):
            pillow = ToUint8Tensor(config, "resize-crop")(file)
            device = DevicePreprocess(config, "resize-crop", "cpu")
            ours = device._resize_crop(torch.from_numpy(pixels)[None].permute(0, 3, 1, 2))[0]
            assert ours.shape == pillow.shape
            diff = (ours - pillow.float()).abs()
            assert diff.max() <= 2 and (diff > 0).float().mean() < 0.01, (config, file.name)
    with pytest.raises(PreprocessError, match="crop mode 'border'"):
        DevicePreprocess({**LITE0_CONFIG, "crop_mode": "border"}, "resize-crop", "cpu")
