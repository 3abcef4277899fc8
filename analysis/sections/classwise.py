"""Class-wise reliance of a suppression design (Burgert et al. 2025, App. I.1): per-class relative accuracy,
how many classes follow the global ranking of the suppressions, and which classes stand out."""

from __future__ import annotations

from .. import classwise
from ..tables import level_parameters, with_parameters
from .base import Section
from .reliance import suppressed_conditions


class ClasswiseReliance(Section):
    """Per-class relative accuracy per suppression, the share of classes following the global ranking, outliers."""

    name = "classwise"
    title = "Class-wise reliance"
    order = 12
    metrics = {"classwise": "classwise_relative_accuracy", "classwise-ranking": "classwise_pairs",
               "classwise-outliers": "classwise_outliers"}
    needs = "'original' and suppression trials of at least two classes"

    def applies(self, scored):
        return bool(suppressed_conditions(scored)) and scored["category"].nunique() >= 2

    def compute(self, result, scored, options, n_choices):
        tests = scored[(scored["role"] == "test") & (scored["trial_type"] == "classify")]
        arms = suppressed_conditions(tests)
        if "original" not in set(tests["condition"]):
            return "class-wise relative accuracy needs 'original' trials as each class's baseline; none here"
        per_class = with_parameters(classwise.class_relative_accuracy(tests, arms, n_choices),
                                    level_parameters(tests))
        global_rel = classwise.global_relative_accuracy(tests, arms)
        result.tables["classwise_relative_accuracy"] = per_class
        result.tables["classwise_pairs"] = classwise.ranking_pairs(per_class, global_rel)
        result.tables["classwise_rankings"] = classwise.ranking_agreement(per_class, global_rel)
        result.tables["classwise_outliers"] = classwise.outlier_classes(per_class)
        if per_class["relative_accuracy"].isna().all():
            return "no class was ever answered right on its originals: no class-wise relative accuracy"
        return None

    def figures(self, analysis, reference):
        per_class = analysis.tables["classwise_relative_accuracy"]
        if per_class["relative_accuracy"].isna().all():
            return {}
        return {"classwise": classwise.class_strip_plot(per_class)}
