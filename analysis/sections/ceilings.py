"""Item-wise noise ceilings of humans and models within condition x level, and each model's agreement with them."""

from __future__ import annotations

from .. import consistency
from .base import Section, record_method


class NoiseCeilings(Section):
    """Leave-one-out and split-half noise ceilings (Nili et al. 2014) within each condition x level, models
    relative to the human one."""

    name = "ceilings"
    title = "Noise ceilings"
    order = 70
    summary_tables = ("noise_ceilings",)
    metrics = {"noise-ceiling": "noise_ceilings", "model-ceiling": "model_vs_human_ceiling"}
    needs = "two observers of a kind"

    def compute(self, result, scored, options, n_choices):
        humans = scored[scored["observer_kind"] == "human"]
        per_trial = int(humans.groupby("trial_id")["observer"].nunique().max()) if len(humans) else 0
        if 0 < per_trial < 2:
            return (f"noise ceiling needs >= 2 people who answered the same trials; none of the "
                    f"{humans['observer'].nunique()} people share any")
        ceilings, relative = consistency.ceilings_and_models(scored, consistency.SPLIT_HALVES, options.seed)
        if len(ceilings):
            result.tables["noise_ceilings"] = ceilings
        if len(relative):
            result.tables["model_vs_human_ceiling"] = relative
        human_rows = ceilings[ceilings["group"] == "human"] if len(ceilings) else ceilings
        if len(human_rows):
            human = human_rows.iloc[0]
            record_method(
                result, "ceilings",
                f"Noise ceilings (Nili et al. 2014) were computed within each of {int(human['cells'])} condition x "
                "level cell(s) and averaged: leave-one-participant-out lower and upper bounds of the agreement of "
                f"item-wise correctness, and split halves ({consistency.SPLIT_HALVES} random halves, Spearman-Brown); "
                f"they rest on the {int(human['observers'])} of {int(human['observers_in_group'])} people who share "
                f"trials ({int(human['pairs'])} pair(s), {int(human['items'])} shared trial(s)).",
                ceiling_unit="condition x level", average="unweighted mean over the cells where the agreement is "
                "defined", bounds="leave one participant out (lower: mean of the others; upper: mean of all)",
                split_half=f"{consistency.SPLIT_HALVES} random halves, stepped up with Spearman-Brown",
                measures=["accuracy: Pearson r of item-wise correctness", "kappa: error consistency with the "
                          "group's majority correctness"],
                cells=int(human["cells"]), observers_sharing_items=int(human["observers"]),
                observers=int(human["observers_in_group"]), pairs_sharing_items=int(human["pairs"]),
                items_shared=int(human["items"]))
        if not len(human_rows):
            return "noise ceiling needs >= 2 people who answered the same trials; there are no people"
        return consistency.ceiling_note(human_rows.iloc[0].to_dict()) or None
