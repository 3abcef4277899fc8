"""Item-wise noise ceilings of humans and models, and each model's agreement with the humans."""

from __future__ import annotations

from .. import consistency
from .base import Section, register


@register
class NoiseCeilings(Section):
    """Leave-one-out and split-half noise ceilings (Nili et al. 2014), models relative to the human one."""

    name = "ceilings"
    title = "Noise ceilings"
    order = 70
    metrics = {"noise-ceiling": "noise_ceilings", "model-ceiling": "model_vs_human_ceiling"}
    needs = "two observers of a kind"

    def compute(self, result, scored, options, n_choices):
        humans = scored[scored["observer_kind"] == "human"]
        per_trial = int(humans.groupby("trial_id")["observer"].nunique().max()) if len(humans) else 0
        if 0 < per_trial < 2:
            return f"noise ceiling needs >= 2 people per trial; {per_trial} so far"
        ceilings, relative = consistency.ceilings_and_models(scored, seed=options.seed)
        if len(ceilings):
            result.tables["noise_ceilings"] = ceilings
        if len(relative):
            result.tables["model_vs_human_ceiling"] = relative
        human_rows = ceilings[ceilings["group"] == "human"] if len(ceilings) else ceilings
        if not len(human_rows):
            return "noise ceiling needs >= 2 people per trial; 0 so far"
        return consistency.ceiling_note(human_rows.iloc[0].to_dict()) or None
