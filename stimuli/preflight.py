"""Refusals a build makes before it writes anything.

A folder whose ``responses.sqlite`` holds answers belongs to that experiment: a build that
would rename it, turn it into another design or change its recorded options is refused
while the folder is still untouched, not after hundreds of stimuli were written into it
(``finish`` checks the trials again at the end, for what options cannot tell).
"""

from __future__ import annotations

import json

from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir, canonical_json


class BuildRefused(CuebenchError):
    """A build would change an experiment that already has responses."""


def responses_held(expdir: ExperimentDir) -> int:
    """How many responses the folder's database holds (0 without one)."""
    if not expdir.responses_file.is_file():
        return 0
    from cuebench.responses import ResponseStore

    with ResponseStore(expdir.responses_file) as store:
        return store.count()


def refuse_changes_to_collected(expdir: ExperimentDir, name: str, design: str, options: dict) -> None:
    """Refuse a build into a folder with responses unless it is the same experiment built the same way.

    Options the earlier build did not record (older versions recorded other sets) are left
    to the final check of the trials.
    """
    if expdir.root.exists() and not expdir.root.is_dir():
        raise BuildRefused(f"{expdir.root} is a file, not an experiment folder")
    held = responses_held(expdir)
    if held == 0:
        return
    if not expdir.exists():
        raise BuildRefused(f"{expdir.root} holds {held} responses but no experiment.json; "
                           "build into a new folder (collected responses are never overwritten)")
    old = expdir.load()
    changes = []
    if old.name != name:
        changes.append(f"its name {old.name!r} to {name!r} (give --name {old.name} to rebuild it)")
    if old.provenance.get("design", design) != design:
        changes.append(f"its design {old.provenance['design']!r} to {design!r}")
    recorded = old.provenance.get("options", {})
    new = json.loads(canonical_json(options))
    differing = sorted(k for k in new if k != "name" and k in recorded and recorded[k] != new[k])
    if differing:
        changes.append("its options " + ", ".join(f"{k}={recorded[k]!r}->{new[k]!r}" for k in differing))
    if changes:
        raise BuildRefused(f"{expdir.root} already holds {held} responses to experiment {old.name!r} and this build "
                           f"would change {'; '.join(changes)}; build into a new folder "
                           "(collected responses are never overwritten)")
