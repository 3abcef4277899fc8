"""Adaptive (QUEST+) blocks in the web task: the next trial and the storage of each answer.

The server keeps no QUEST+ state: every request rebuilds the participant's block from the
answers already stored (``cuebench.counterbalance.adaptive_blocks``), so the level shown next is
the same whichever server thread or process answers, and a reload continues the block.
The browser asks for the next trial, shows it, posts the answer, and only then asks again,
because each level depends on the answer before it. As with the fixed sequence, the browser
never sees a trial id, condition, level or correct answer.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from cuebench.adaptive import ObserverBlock
from cuebench.counterbalance import ScheduledTrial, adaptive_blocks
from cuebench.responses import ResponseConflict, score, trial_row

from .participant import _in_progress, _keep_place, _participant, _refuse_unfit_agent, _study, mask_png, trial_plan
from .plausibility import server_time
from .validation import Rejected, check_trial_post, parse_json_body

bp = Blueprint("adaptive", __name__)


def _block(token: str, number: int) -> tuple[ObserverBlock, object]:
    study = _study()
    participant = _participant(token)
    blocks = adaptive_blocks(study.experiment, study.store, participant.code, participant.observer_kind)
    if not 0 <= number < len(blocks):
        raise Rejected(404, f"adaptive block {number} does not exist (this experiment has {len(blocks)})")
    return blocks[number], participant


def _next(block: ObserverBlock, index: int):
    """The trial QUEST+ shows at ``index``, which must be the block's next answer."""
    if block.finished:
        raise Rejected(409, f"adaptive block {block.session!r} is finished after {block.index} answers")
    if index != block.index:
        raise Rejected(409, f"adaptive block {block.session!r} expects answer {block.index} next, not {index}")
    level, trial_id = block.next_trial()
    return level, _study().experiment.trial(trial_id)


@bp.get("/api/session/<token>/adaptive")
def next_trial(token: str):
    """The first unfinished block's next trial (same fields as a fixed trial of the plan), or ``done``."""
    study = _study()
    participant = _participant(token)
    for number, block in enumerate(adaptive_blocks(study.experiment, study.store, participant.code, participant.observer_kind)):
        if block.finished:
            continue
        _, trial = _next(block, block.index)
        plan = trial_plan(study, token, ScheduledTrial(block.index, trial.trial_id, -1 - number, False),
                          adaptive_api=f"/api/session/{token}/adaptive/{number}")
        return jsonify(done=False, block=number, trials=block.plan.trials, trial=plan.message())
    return jsonify(done=True)


@bp.get("/api/session/<token>/adaptive/<int:number>/mask/<int:index>.png")
def mask(token: str, number: int, index: int):
    block, _ = _block(token, number)
    return mask_png(_study(), _next(block, index)[1])


@bp.post("/api/session/<token>/adaptive/<int:number>/trial/<int:index>")
def post_trial(token: str, number: int, index: int):
    """Store one answer with the level shown and QUEST+'s estimate after it; a repeated post of a stored
    answer is acknowledged without storing it again."""
    study = _study()
    block, participant = _block(token, number)
    _in_progress(participant)
    _refuse_unfit_agent(study, participant)
    _keep_place(study, participant)
    if index < block.index:
        return jsonify(index=index, stored=False), 200
    level, trial = _next(block, index)
    measured = check_trial_post(study.experiment, trial, study.trial_key(trial.trial_id),
                                parse_json_body(request.get_data()))
    response = measured.pop("response")
    fields = block.record(level, trial.trial_id, bool(score(trial, response)))
    row = trial_row(study.experiment, trial, observer=participant.code, observer_kind=participant.observer_kind,
                    response=response, group=participant.group, created_at=server_time(study.db.clock()), **fields,
                    **measured)
    try:
        result = study.store.write(row)
    except ResponseConflict as err:
        raise Rejected(409, str(err)) from None
    study.db.renew([participant.code])
    return jsonify(index=index, stored=result.stored, finished=block.finished), 201
