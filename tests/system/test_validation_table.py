"""docs/validation.md: generated from the tests' ``validates`` marks, up to date, and a row for every statistic
the reports print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from validation_table import MarkError, collect, file_rows, render  # noqa: E402

REPORTED = {
    "accuracy": r"accuracy per condition|Wilson",
    "group_accuracy": r"mean accuracy over observers",
    "relative_accuracy": r"relative accuracy",
    "group_relative_accuracy": r"relative accuracy",
    "shape_bias": r"shape bias",
    "shape_bias_by_category": r"shape bias per observer and per category",
    "cue_decomposition": r"S_cd",
    "oddity": r"oddity",
    "error_consistency": r"error consistency|kappa",
    "noise_ceilings": r"noise ceiling",
    "model_vs_human_ceiling": r"noise ceiling|ceiling",
    "thresholds": r"psychometric|threshold",
    "adaptive_thresholds": r"QUEST",
    "ttests": r"paired t-test",
    "friedman_ranks": r"Friedman",
    "nemenyi_p": r"Nemenyi",
    "rank_correlations": r"Spearman",
    "error_consistency_cells": r"error consistency kappa per condition x level",
    "classwise_relative_accuracy": r"class-wise relative accuracy",
    "classwise_pairs": r"share of classes following",
    "classwise_outliers": r"outlier classes",
    "relative_robustness": r"relative corruption robustness",
    "seg_relative_robustness": r"relative corruption robustness",
    "robustness_correlations": r"rank correlation of classification metrics",
    "segmentation_miou": r"segmentation mIoU",
    "segmentation_class_iou": r"segmentation mIoU",
    "seg_boundaries": r"segmentation mIoU",
    "seg_cue_decomposition": r"segmentation S_cd and R_cd",
    "seg_class_cue_decomposition": r"segmentation S_cd and R_cd",
    "seg_correlations": r"rank correlation of segmentation metrics",
}
"""Each table a report section prints -> how a validation row names its statistic."""
NOT_STATISTICS = {"exclusion_summary": "counts of excluded trials by reason",
                  "methods": "the methods paragraph (its numbers: tests/analysis/test_methods_paragraph.py)",
                  "observer_summary": "one row per observer gathering the other tables' values",
                  "segmentation_summary": "one row per segmentation model gathering the other tables' values"}
ALSO_REPORTED = {"effect sizes of the t-tests": r"d_z", "DiagViB-6 factor aggregates": r"FAAvg",
                 "cue-study differences from ERM": r"Welch", "sample-size plan": r"plan"}
"""Statistics printed outside the experiment report's sections (t-test columns, study reports, ``cuebench plan``)."""


def test_docs_validation_md_is_generated_from_the_marks_and_up_to_date():
    done = subprocess.run([sys.executable, "scripts/validation_table.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr + "(run: python scripts/validation_table.py)"


def test_every_statistic_the_report_prints_has_a_validation_row():
    from analysis.sections import SECTIONS

    tables = {table for _, cls in SECTIONS.working() for table in cls.metrics.values()}
    assert tables - set(NOT_STATISTICS) == set(REPORTED), "a new report table needs an entry here and a validates row"
    statistics = [row.statistic for row in collect()]
    for table, pattern in {**REPORTED, **ALSO_REPORTED}.items():
        assert any(re.search(pattern, s, re.IGNORECASE) for s in statistics), f"no validation row for {table}"


def test_rows_are_read_from_literal_marks_sorted_and_escaped(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_b.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.validates('b stat', definition='x | y', source='S', reference='R', tolerance='0.1')\n"
        "def test_one():\n    pass\n\n\n"
        "@pytest.mark.validates('A stat', definition='d', source='s', reference='r', tolerance='t')\n"
        "class TestGroup:\n    def test_two(self):\n        pass\n")
    rows = collect(tests, tmp_path)
    assert [(r.statistic, r.test) for r in rows] == [("A stat", "tests/test_b.py::TestGroup::test_two"),
                                                     ("b stat", "tests/test_b.py::test_one")]
    assert "| b stat | x \\| y (S) | R | 0.1 | `tests/test_b.py::test_one` |" in render(rows)
    (tests / "test_c.py").write_text("import pytest\nT = 'x'\n\n\n"
                                     "@pytest.mark.validates('s', definition=T, source='s', reference='r', "
                                     "tolerance='t')\ndef test_three():\n    pass\n")
    with pytest.raises(MarkError, match=r"test_c.py:5: write the validates mark's arguments as literal strings"):
        file_rows(tests / "test_c.py", tmp_path)
    (tests / "test_c.py").write_text("import pytest\n\n\n@pytest.mark.validates('s', definition='d')\n"
                                     "def test_four():\n    pass\n")
    with pytest.raises(MarkError, match="missing source, reference, tolerance"):
        file_rows(tests / "test_c.py", tmp_path)
