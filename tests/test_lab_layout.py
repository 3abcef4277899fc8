"""The response grid: alphabetical row-major 4x4, "not clear" below, keys and hit tests."""

import pytest

from human_tasks.layout import KEY_ROWS, NOT_CLEAR_KEY, LayoutError, row_positions, response_grid
from cuebench.labels import IMAGENET16
from cuebench.trials import NOT_CLEAR, LabelSet


def test_sixteen_labels_fill_the_grid_alphabetically_row_by_row():
    shuffled = tuple(reversed(IMAGENET16))
    grid = response_grid(LabelSet("imagenet16", shuffled), cell_width=200, cell_height=60, gap=10)
    rows = [[c.label for c in grid.cells if c.row == r] for r in range(4)]
    assert rows == [["airplane", "bear", "bicycle", "bird"], ["boat", "bottle", "car", "cat"],
                    ["chair", "clock", "dog", "elephant"], ["keyboard", "knife", "oven", "truck"]]
    assert [c.col for c in grid.cells[:4]] == [0, 1, 2, 3]
    # columns 210 px apart and centred; rows 70 px apart, top row highest (y up)
    assert [c.x for c in grid.cells[:4]] == [-315, -105, 105, 315]
    assert [grid.cell(lab).y for lab in ("airplane", "boat", "chair", "keyboard")] == [140, 70, 0, -70]


def test_not_clear_sits_centred_below_the_grid_and_answers_with_space():
    grid = response_grid(LabelSet("imagenet16", IMAGENET16), cell_width=200, cell_height=60, gap=10)
    not_clear = grid.cells[-1]
    assert not_clear.label == NOT_CLEAR and not_clear.row == 4 and not_clear.col is None
    assert (not_clear.x, not_clear.y) == (0, -140)
    assert not_clear.width == 410  # two cells and the gap between them
    assert min(c.y for c in grid.cells[:-1]) > not_clear.y
    assert not_clear.key == NOT_CLEAR_KEY == "space"


def test_keyboard_mapping_mirrors_the_grid_on_the_left_key_block():
    grid = response_grid(LabelSet("imagenet16", IMAGENET16))
    assert [c.key for c in grid.cells[:-1]] == list("".join(KEY_ROWS))
    assert grid.label_for_key("1") == "airplane"
    assert grid.label_for_key("r") == "cat"
    assert grid.label_for_key("z") == "keyboard"
    assert grid.label_for_key("v") == "truck"
    assert grid.label_for_key("space") == NOT_CLEAR
    assert grid.label_for_key("p") is None
    assert grid.has_all_keys


def test_clicks_hit_the_cell_under_them_and_miss_between_cells():
    grid = response_grid(LabelSet("imagenet16", IMAGENET16), cell_width=200, cell_height=60, gap=10)
    assert grid.cell_at(-315, 140).label == "airplane"
    assert grid.cell_at(-315 + 99, 140 - 29).label == "airplane"  # inside the edge
    assert grid.cell_at(-210, 140) is None  # in the gap between airplane and bear
    assert grid.cell_at(150, -140).label == NOT_CLEAR
    assert grid.cell_at(0, 400) is None


def test_given_order_without_not_clear_and_label_sets_larger_than_the_keys():
    grid = response_grid(LabelSet("few", ("zebra", "ant", "moth"), display_order="given", not_clear=False))
    assert grid.labels == ["zebra", "ant", "moth"] and all(c.row == 0 for c in grid.cells)
    many = response_grid(LabelSet("many", tuple(f"class{i:02d}" for i in range(18))))
    assert many.cell("class16").key is None and many.cell("class16").row == 4
    assert many.cell(NOT_CLEAR).row == 5
    assert not many.has_all_keys
    with pytest.raises(LayoutError):
        response_grid(LabelSet("only-not-clear", ()))


def test_oddity_images_are_side_by_side_and_centred():
    assert row_positions(3, 224, gap=40) == [-264, 0, 264]
