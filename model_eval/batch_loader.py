"""Batches of decoded stimuli on the model's device, gathered ahead while the model runs, and their
answers handled behind it.

Gathering a batch from the memory-mapped cache (``stimulus_cache.DecodedStimuli.gather``:
page reads and a row copy) is host work the model need not wait for: a background thread
gathers up to ``ahead`` batches in advance (numpy's copy releases the GIL, so it overlaps the
forward pass). On a GPU it gathers into buffers of its own, pinned, and each batch is
copied to the device without blocking; a buffer is refilled only once the copy out of it has
finished (a CUDA event recorded after the copy), never by waiting on the model. Nothing here
synchronises with the device per batch: the only waits are the copy events of buffers about
to be reused.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .stimulus_cache import DecodedStimuli

AHEAD = 2
"""Batches gathered in advance: one overlaps the forward pass, the second absorbs an uneven page read."""


@dataclass
class _Slot:
    """A place for one batch in flight: on CUDA its pinned buffer and the event after which the copy out of it
    is done."""

    buffer: Any = None
    copied: Any = None


def batches_on_device(decoded: DecodedStimuli, batches: list[list[str]], device: str,
                      ahead: int = AHEAD) -> Iterator[tuple[list[str], Any]]:
    """(ids, uint8 (n, H, W, 3) tensor on ``device``) per batch, in order."""
    import torch

    cuda = device.startswith("cuda")
    largest = max((len(ids) for ids in batches), default=0)
    free: queue.Queue = queue.Queue()
    ready: queue.Queue = queue.Queue()
    for _ in range(ahead + 1):  # `ahead` waiting in `ready`, one in the consumer's hands
        free.put(_Slot())
    stop = threading.Event()

    def produce() -> None:
        try:
            for ids in batches:
                slot = free.get()
                if stop.is_set():
                    return
                if not cuda:  # a fresh array per batch: the model may hold on to its input
                    ready.put((ids, slot, torch.from_numpy(decoded.gather(ids))))
                    continue
                if slot.copied is not None:
                    slot.copied.synchronize()
                shape = (largest, *decoded.shape(ids[0]), 3)
                if slot.buffer is None or tuple(slot.buffer.shape) != shape:
                    slot.buffer = torch.empty(shape, dtype=torch.uint8, pin_memory=True)
                decoded.gather(ids, out=slot.buffer.numpy())
                ready.put((ids, slot, slot.buffer[:len(ids)]))
        except BaseException as err:  # surfaces in the consumer, which re-raises it
            ready.put(err)

    producer = threading.Thread(target=produce, name="batch-gatherer", daemon=True)
    producer.start()
    try:
        for _ in batches:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            ids, slot, pixels = item
            if cuda:
                pixels = pixels.to(device, non_blocking=True)
                slot.copied = slot.copied or torch.cuda.Event()
                slot.copied.record()
            free.put(slot)
            yield ids, pixels
    finally:
        stop.set()
        free.put(_Slot())  # wakes a producer waiting for a buffer, which then sees the stop
        producer.join()


@contextmanager
def handled_behind(handle: Callable[[Any], None], ahead: int = AHEAD) -> Iterator[Callable[[Any], None]]:
    """A function that hands each item to ``handle`` on a background thread, in order, at most ``ahead``
    items waiting: the model's next batches run while earlier answers are decided and stored, so per-row
    host work (decisions, validation, the database) no longer stops the device. An error in ``handle`` is
    raised in the caller at its next hand-over or when the block ends; when the block itself fails, the items
    already handed over are still handled (their answers are stored) before the error goes on."""
    import torch

    waiting: queue.Queue = queue.Queue(maxsize=ahead)
    failed: list[BaseException] = []
    done = object()

    def work() -> None:
        with torch.inference_mode():  # the mode is per thread; the outputs are inference tensors
            while (item := waiting.get()) is not done:
                if not failed:
                    try:
                        handle(item)
                    except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                        failed.append(err)

    def hand_over(item: Any) -> None:
        if failed:
            raise failed[0]
        waiting.put(item)

    worker = threading.Thread(target=work, name="answer-writer", daemon=True)
    worker.start()
    try:
        yield hand_over
    finally:
        waiting.put(done)
        worker.join()
    if failed:
        raise failed[0]
