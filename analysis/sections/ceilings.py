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
        ceilings, relative = consistency.ceilings_and_models(scored, seed=options.seed)
        if len(ceilings):
            result.tables["noise_ceilings"] = ceilings
        if len(relative):
            result.tables["model_vs_human_ceiling"] = relative
        humans = ceilings[ceilings["group"] == "human"] if len(ceilings) else ceilings
        if not len(humans):
            return "noise ceiling needs >= 2 people per trial; 0 so far"
        return consistency.ceiling_note(humans.iloc[0].to_dict()) or None
