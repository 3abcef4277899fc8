"""Feature-suppression transforms on real photos: what each keeps, what it changes, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest

from cuebench.errors import CuebenchError
from stimuli.suppression import CONDITIONS, HUMAN_STUDY, SuppressionError, get_condition, suppress

STOCHASTIC = ("patch_shuffle", "patch_rotation", "grid_overlay", "channel_shuffle")


@pytest.fixture(scope="module")
def cat(photos) -> np.ndarray:
    return photos["chelsea"]


def cells(image: np.ndarray, grid: int) -> list[np.ndarray]:
    """The g x g equal square cells of the centred region, row-major (the documented policy)."""
    side = min(image.shape[:2]) // grid
    top, left = (image.shape[0] - grid * side) // 2, (image.shape[1] - grid * side) // 2
    return [image[top + r * side: top + (r + 1) * side, left + c * side: left + (c + 1) * side]
            for r in range(grid) for c in range(grid)]


def sorted_pixels(image: np.ndarray) -> np.ndarray:
    flat = image.reshape(-1, 3)
    return flat[np.lexsort(flat.T[::-1])]


@pytest.mark.parametrize("grid", [2, 3, 6, 7, 16])
def test_patch_shuffle_keeps_pixels_and_moves_cells(photos, grid):
    for image in photos.values():
        out = suppress(image, "patch_shuffle", {"grid": grid}, seed=1)
        assert out.dtype == np.uint8 and out.shape == image.shape
        np.testing.assert_array_equal(sorted_pixels(out), sorted_pixels(image))  # same RGB multiset
        assert not np.array_equal(out, image)
        before = sorted(c.tobytes() for c in cells(image, grid))
        after = sorted(c.tobytes() for c in cells(out, grid))
        assert before == after  # the cells are permuted, each intact


def test_patch_shuffle_leaves_the_frame_of_an_uneven_grid(cat):
    out = suppress(cat, "patch_shuffle", {"grid": 15}, seed=3)  # 15 * 14 = 210: a 7-px frame
    np.testing.assert_array_equal(out[:7], cat[:7])
    np.testing.assert_array_equal(out[-7:], cat[-7:])
    np.testing.assert_array_equal(out[:, :7], cat[:, :7])
    assert not np.array_equal(out[7:-7, 7:-7], cat[7:-7, 7:-7])


def test_patch_shuffle_on_a_non_square_image(photos):
    image = photos["coffee"][:150, :200]
    out = suppress(image, "patch_shuffle", {"grid": 7}, seed=0)
    assert out.shape == image.shape
    np.testing.assert_array_equal(sorted_pixels(out), sorted_pixels(image))


def test_patch_rotation_turns_each_cell_in_place(cat):
    grid = 6
    out = suppress(cat, "patch_rotation", {"grid": grid}, seed=5)
    turns = []
    for before, after in zip(cells(cat, grid), cells(out, grid)):
        matches = [k for k in range(4) if np.array_equal(np.rot90(before, k), after)]
        assert matches, "every cell is a rotation of the cell that was there"
        turns.append(matches[0])
    assert set(turns) == {0, 1, 2, 3}
    np.testing.assert_array_equal(out[0], cat[0])  # 224 = 6 * 37 + 2: one-pixel frame kept


def test_grid_overlay_copies_only_the_shuffled_block_edges(cat):
    grid, seed = 4, 9
    shuffled = suppress(cat, "patch_shuffle", {"grid": grid}, seed=seed)
    out = suppress(cat, "grid_overlay", {"grid": grid}, seed=seed)
    lines = np.zeros(cat.shape[:2], bool)
    for b in (56, 112, 168):  # 224 / 4: cell borders; 1 px either side
        lines[b - 1: b + 1, :] = True
        lines[:, b - 1: b + 1] = True
    np.testing.assert_array_equal(out[~lines], cat[~lines])
    np.testing.assert_array_equal(out[lines], shuffled[lines])
    assert not np.array_equal(out, cat)


def test_grayscale_gives_equal_channels_and_blends_by_alpha(photos):
    for image in photos.values():
        gray = suppress(image, "grayscale", {"alpha": 1.0}, seed=0)
        assert np.array_equal(gray[..., 0], gray[..., 1]) and np.array_equal(gray[..., 1], gray[..., 2])
    pixel = np.array([[[200, 100, 50]]], np.uint8)
    # luma = .299*200 + .587*100 + .114*50 = 124.2 -> 124; alpha .4: .6*c + .4*124
    np.testing.assert_array_equal(suppress(pixel, "grayscale", {"alpha": 0.4}, 0), [[[170, 110, 80]]])
    np.testing.assert_array_equal(suppress(pixel, "grayscale", {"alpha": 1.0}, 0), [[[124, 124, 124]]])
    np.testing.assert_array_equal(suppress(pixel, "grayscale", {"alpha": 0.0}, 0), pixel)


def test_channel_shuffle_permutes_channels(cat):
    seen = set()
    for seed in range(40):
        out = suppress(cat, "channel_shuffle", {}, seed)
        order = tuple(next(c for c in range(3) if np.array_equal(out[..., i], cat[..., c])) for i in range(3))
        assert sorted(order) == [0, 1, 2] and order != (0, 1, 2)
        seen.add(order)
    assert len(seen) == 5  # every non-identity permutation occurs


def test_texture_filters_smooth_but_keep_size(cat):
    for name in ("bilateral", "gaussian_blur", "box_blur", "median_blur", "nonlocal_means"):
        params = CONDITIONS[name].grid[-1]
        out = suppress(cat, name, params, 0)
        assert out.shape == cat.shape and out.dtype == np.uint8
        # smoothing lowers the mean absolute difference between horizontal neighbours
        assert np.abs(np.diff(out.astype(int), axis=1)).mean() < np.abs(np.diff(cat.astype(int), axis=1)).mean()


def test_nonlocal_means_denoises_a_gray_image_as_gray(cat):
    gray = suppress(cat, "grayscale", {"alpha": 1.0}, 0)
    out = suppress(gray, "nonlocal_means", {"h": 20, "template_window": 7, "search_window": 21}, 0)
    assert np.array_equal(out[..., 0], out[..., 2]) and not np.array_equal(out, gray)


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_every_grid_level_runs_and_is_deterministic(cat, name):
    condition = CONDITIONS[name]
    assert condition.cue.split("+")[0] in ("shape", "texture", "colour", "control")
    for params in condition.grid:
        first = suppress(cat, name, params, seed=11)
        assert first.dtype == np.uint8 and first.shape == cat.shape
        np.testing.assert_array_equal(first, suppress(cat, name, params, seed=11))
    if not condition.stochastic:
        np.testing.assert_array_equal(first, suppress(cat, name, params, seed=12))


@pytest.mark.parametrize("name", STOCHASTIC)
def test_another_seed_gives_another_image(cat, name):
    params = CONDITIONS[name].grid[4] if len(CONDITIONS[name].grid) > 4 else {}
    outputs = {suppress(cat, name, params, seed).tobytes() for seed in range(3)}
    assert len(outputs) == 3 if name != "channel_shuffle" else len(outputs) >= 2


def test_joint_suppression_applies_both(cat):
    params = {"patch_shuffle": {"grid": 6}, "grayscale": {"alpha": 1.0}}
    out = suppress(cat, "patch_shuffle+grayscale", params, seed=2)
    assert np.array_equal(out[..., 0], out[..., 1])
    gray = suppress(cat, "grayscale", {"alpha": 1.0}, 0)
    np.testing.assert_array_equal(np.sort(out.ravel()), np.sort(gray.ravel()))  # shuffling moves, never changes
    assert not np.array_equal(out, gray)


def test_joint_grid_walks_both_grids_from_weakest_to_strongest():
    joint = get_condition("gaussian_blur+channel_shuffle")
    assert joint.cue == "texture+colour" and joint.stochastic and joint.human_params is None
    assert len(joint.grid) == len(CONDITIONS["gaussian_blur"].grid)
    assert joint.grid[0]["gaussian_blur"] == CONDITIONS["gaussian_blur"].grid[0]
    assert joint.grid[-1]["gaussian_blur"] == CONDITIONS["gaussian_blur"].grid[-1]
    shuffle_gray = CONDITIONS["patch_shuffle+grayscale"]
    assert shuffle_gray.grid[0] == {"patch_shuffle": {"grid": 2}, "grayscale": {"alpha": 0.2}}
    assert shuffle_gray.grid[-1] == {"patch_shuffle": {"grid": 16}, "grayscale": {"alpha": 1.0}}
    assert shuffle_gray.human_params == {"patch_shuffle": {"grid": 6}, "grayscale": {"alpha": 1.0}}


def test_human_study_settings_match_the_paper():
    assert [name for _, name, _ in HUMAN_STUDY] == ["original", "patch_shuffle", "patch_shuffle", "bilateral",
                                                    "grayscale"]
    assert CONDITIONS["bilateral"].human_params == {"d": 12, "sigma_color": 170, "sigma_space": 75}
    assert CONDITIONS["bilateral"].grid[4] == CONDITIONS["bilateral"].human_params
    assert [p["grid"] for p in CONDITIONS["patch_shuffle"].grid] == list(range(2, 17))


@pytest.mark.parametrize("condition, params, needle", [
    ("patch_shufle", {"grid": 6}, "known: original, patch_shuffle"),
    ("patch_shuffle", {"grid": 1}, "grid=1 is not an integer from 2"),
    ("patch_shuffle", {"grid": 500}, "grid=500 is too fine"),
    ("patch_shuffle", {"grid": 2.5}, "grid=2.5"),
    ("patch_shuffle", {"grid": True}, "grid=True"),
    ("patch_shuffle", {"size": 6}, "unknown parameter(s) ['size']; parameters: grid"),
    ("gaussian_blur", {"ksize": 4, "sigma": 1.0}, "ksize=4 is not an odd integer"),
    ("bilateral", {"d": 12, "sigma_color": 170}, "missing parameter(s) ['sigma_space']"),
    ("grayscale", {"alpha": 1.5}, "alpha=1.5 is not a number in [0, 1]"),
    ("grayscale", "alpha=1", "params must be a dict"),
    ("grayscale+grayscale", {}, "must differ"),
    ("grayscale+bilateral+patch_shuffle", {}, "exactly two"),
    ("grayscale+blur", {}, "unknown suppression condition 'blur' in 'grayscale+blur'"),
    ("patch_shuffle+grayscale", {"patch_shuffle": {"grid": 6}}, "params must be {name: params}"),
])
def test_bad_input_names_the_condition_and_the_allowed_values(cat, condition, params, needle):
    with pytest.raises(SuppressionError) as err:
        suppress(cat, condition, params, 0)
    assert needle in str(err.value)
    assert isinstance(err.value, CuebenchError)


def test_bad_image_or_seed_is_refused(cat):
    with pytest.raises(SuppressionError, match="uint8 RGB"):
        suppress(cat.astype(np.float32), "grayscale", {"alpha": 1.0}, 0)
    with pytest.raises(SuppressionError, match="uint8 RGB"):
        suppress(cat[..., 0], "grayscale", {"alpha": 1.0}, 0)
    with pytest.raises(SuppressionError, match="seed must be a non-negative integer"):
        suppress(cat, "patch_shuffle", {"grid": 3}, -1)
