"""Folder labels found among the ImageNet-1k classes (``cuebench.labels``); ``cuebench labels search`` for the
researcher. Their use at build time and by ``cuebench eval`` is checked in ``tests/model_eval/test_folder_labels.py``.

Expected indices are the ImageNet-1k class order every timm model uses (e.g. model-vs-human's
16-class lists: cat 281-285, truck 555/569/717/864/867; 849 teapot, 817 sports car)."""

from __future__ import annotations

from cuebench.labels import imagenet_mapping, matching_classes


def test_a_label_names_the_classes_it_heads():
    assert [c.index for c in matching_classes("teapot")] == [849]
    assert {281, 282, 283, 284, 285} <= {c.index for c in matching_classes("cat")}
    assert {555, 569, 717, 864, 867} <= {c.index for c in matching_classes("trucks")}  # plural, head noun
    assert [c.index for c in matching_classes("sports_car")] == [817]
    assert imagenet_mapping(["teapot", "qwerty-not-a-class"]) == {"teapot": [849]}


def test_labels_search_prints_candidates_with_indices(core_command, capsys):
    assert core_command("labels", "search", "tabby") == 0
    out = capsys.readouterr().out
    assert "281" in out and "tabby cat" in out
    assert core_command("labels", "search", "notaclassname") == 2
    assert "no ImageNet-1k class has 'notaclassname'" in capsys.readouterr().err
