"""The lab shows a participant's trials by the same plans the web server sends the browser (``TrialPlan``):
for every trial of one participant's sequence, the lab's plan and the browser's agree on everything but where
the images are and the trial's key (the lab names the trial; the browser gets an opaque one)."""

from __future__ import annotations

from pathlib import PurePosixPath

from cuebench.expdir import ExperimentDir
from experiment_server.app import create_app
from experiment_server.study import study_of
from human_tasks.lab.session import lab_plan
from human_tasks.layout import response_grid
from stimuli.web_sample import build_sample_experiment
from support import plan, start

WHERE = ("images", "mask", "trial_key")


def test_the_lab_and_the_browser_show_a_sequence_by_the_same_plans(tmp_path):
    experiment = build_sample_experiment(tmp_path)
    app = create_app(tmp_path)
    client = app.test_client()
    web = plan(client, start(client, code="same-plans"))["trials"]
    study = study_of(app)
    participant = study.db.participants(experiment.name)[0]
    sequence = study.sequence(participant)
    expdir, grid = ExperimentDir(tmp_path), response_grid(experiment.label_set)
    lab = [lab_plan(expdir, experiment, grid, experiment.trial(s.trial_id), s.index, s.block, s.break_before).message()
           for s in sequence]
    assert len(lab) == len(web) == len(sequence)
    for scheduled, lab_trial, web_trial in zip(sequence, lab, web):
        assert {k: v for k, v in lab_trial.items() if k not in WHERE} == \
            {k: v for k, v in web_trial.items() if k not in WHERE}
        assert lab_trial["trial_key"] == scheduled.trial_id != web_trial["trial_key"]
        # the same image files, as the lab's paths and the browser's URLs
        assert [PurePosixPath(p).name for p in lab_trial["images"]] == [u.rsplit("/", 1)[1] for u in web_trial["images"]]
        assert (lab_trial["mask"] is None) == (web_trial["mask"] is None)
    assert {t["type"] for t in lab} == {"classify", "oddity"} and any(t["grid"] for t in lab)
    assert any(t["practice"] for t in lab) and any(t["instruction"] for t in lab)
