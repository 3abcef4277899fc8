"""What ``cuebench serve`` checks before anyone reads a page: a consent whose ethics fields are filled in (the
default's ``[[...]]`` placeholders; the research team's pilots alone may read the draft, ``--pilot-only``) and a
session time limit the study fits in (checked against its expected length)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from cuebench.expdir import ExperimentDir
from cuebench.texts import default_texts, placeholders
from cuebench.words import languages
from cuebench_app.cli import main
from experiment_server.admin import set_admin_password
from experiment_server.app import create_app
from experiment_server.simulate import NONCE, ClientLog, ServerProcess, SimulatedParticipant, free_port
from experiment_server.study import open_study, study_of
from experiment_server.study_rules import RulesError, StudyRules, check_time_limit
from stimuli.web_sample import build_sample_experiment
from support import ADMIN_PASSWORD, cuebench_in_process as cuebench, login

FIELDS = {"en": ["researcher", "purpose", "approval", "risks", "retention"],
          "de": ["Forschende", "Zweck", "Ethikvotum", "Risiken", "Aufbewahrung"]}
"""The default consent's fields only the researcher can fill in: contact, purpose, ethics approval, risks, data
retention (duration, voluntariness and how to withdraw it states itself)."""


def test_the_default_consent_asks_for_the_ethics_fields_in_every_language(tmp_path):
    experiment = build_sample_experiment(tmp_path / "exp")
    assert set(languages()) == set(FIELDS)  # a new language's catalogue gets its fields listed here
    for language, fields in FIELDS.items():
        consent = default_texts(experiment.model_copy(update={"language": language}))["consent"]
        folder = tmp_path / language
        (folder / "texts" / language).mkdir(parents=True)
        (folder / "texts" / language / "consent.md").write_text(consent, encoding="utf-8")
        assert placeholders(ExperimentDir(folder), language) == {f"texts/{language}/consent.md": fields}
        minutes = {"en": "takes about", "de": "dauert etwa"}[language]
        assert consent.count(minutes) == 2  # the duration, in the welcome and among the fields


def test_serve_refuses_unfilled_placeholders_and_serves_the_draft_to_pilots_only(tmp_path, capsys):
    """Unedited, ``cuebench serve`` stops in one line naming the fields; with ``--pilot-only`` a real server starts
    on the same draft, shows it to a pilot code, and turns everyone else away at the consent page and at
    ``/start`` (a form posted with a pilot's nonce), storing nobody."""
    expdir = tmp_path / "exp"
    build_sample_experiment(expdir)
    assert main(["serve", str(expdir), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "exp/texts/consent.md: researcher, purpose, approval, risks, retention" in err
    assert "--pilot-only" in err
    study = open_study(expdir)
    study.db.add_pilot_codes(study.experiment.name, ["ready"])  # the code ServerProcess's readiness probe opens
    study.close()
    server = ServerProcess(expdir, free_port(), threads=2, extra_args=("--pilot-only",), log_file=tmp_path / "log")
    server.start()
    try:
        pilot = SimulatedParticipant(server.port, {"code": "ready"}, ClientLog())
        draft = pilot.request("GET", "/?code=ready")
        assert draft.status == 200 and "[[researcher:" in draft.body.decode()
        nonce = NONCE.search(draft.body.decode()).group(1)
        for entry in ({"code": "someone"}, {"PROLIFIC_PID": "a" * 24, "STUDY_ID": "s", "SESSION_ID": "1"}):
            refused = pilot.request("GET", f"/?{urlencode(entry)}")
            assert refused.status == 403 and "not open yet" in refused.body.decode()
            form = urlencode({"consent": "yes", "start_nonce": nonce, **entry}).encode()
            assert pilot.request("POST", "/start", form, "application/x-www-form-urlencoded").status == 403
        assert pilot.start()  # the pilot takes part
    finally:
        server.stop()
    study = open_study(expdir)
    people = study.db.participants(study.experiment.name)
    study.close()
    assert [(p.entry_code, p.observer_kind) for p in people] == [("ready", "pilot")]


def test_serve_refuses_a_time_limit_shorter_than_the_study(tmp_path, photos, capsys):
    """Eight photos, each trial 500 ms fixation, 200 ms image, 200 ms mask, a 20 s answer window and 600 ms ITI:
    8 x 21.5 s = 2.87 min of trials and 3 min of instructions and setup, no break, so about 6 minutes (by hand).
    The build says so, ``--time-limit 5`` is refused naming it, and 6 is accepted."""
    built = cuebench(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", "default", "--attention",
                     "0", "--workers", "1", "--timing", "fixation=500,stimulus=200,mask=200,iti=600,response=20000",
                     "--out", "exp")
    assert "about 6 minutes a participant (the least `cuebench serve --time-limit` allows)" in built
    experiment = ExperimentDir(tmp_path / "exp").load()
    assert len(experiment.trials) == 8
    capsys.readouterr()  # the build's progress
    assert main(["serve", str(tmp_path / "exp"), "--time-limit", "5", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--time-limit 5 is shorter than the study takes: about 6 minutes expected" in err
    assert "(8 trials taking 2.9 min with time to answer, 3 min of instructions and setup)" in err
    assert "give at least 6" in err
    check_time_limit(StudyRules(time_limit_min=6), experiment)
    with pytest.raises(RulesError, match="about 6 minutes"):
        check_time_limit(StudyRules(time_limit_min=5.9), experiment)


def test_the_admin_page_says_only_pilots_may_start(tmp_path):
    build_sample_experiment(tmp_path / "exp")
    app = create_app(tmp_path / "exp", rules=StudyRules(pilot_only=True))
    set_admin_password(study_of(app), ADMIN_PASSWORD)
    client = app.test_client()
    login(client)
    assert "Only pilot entry codes may start" in client.get("/admin/").get_data(as_text=True)
