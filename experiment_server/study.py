"""The study a server process serves: one experiment directory, its response store and server tables.

Every blueprint reaches it through ``study_of(app)``; it lives here, apart from the app
factory, so the blueprints and the factory import it without importing each other.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import shutil
import threading
import time
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Callable

from flask import Flask

from cuebench.counterbalance import ScheduledTrial, participant_sequence
from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir, OutsideExperimentError
from cuebench.responses import ResponseStore
from cuebench.segmentation import refuse_for_people
from cuebench.storage import is_database_url
from cuebench.questionnaire import QUESTIONNAIRE_FILE, Questionnaire, QuestionnaireError, load_questionnaire
from cuebench.texts import NAMES as TEXT_NAMES, text_path, to_html, write_default_texts
from cuebench.words import say
from cuebench.trials import Experiment
from human_tasks.layout import ResponseGrid, response_grid

from .assignment import HOLD_SECONDS, RESERVATION_SECONDS
from .db import OUTCOMES, Participant, ServerDB
from .group_commit import GroupCommit
from .server_secrets import KEYS, SECRET_KEYS, ServerSecrets, default_secrets_path, new_key
from .trial_types import UnservedTrialType, check_served

log = logging.getLogger("cuebench.serve")
TEXT_SETTLE_NS = 2_000_000_000
"""How long after a text's last change its rendering is kept (``Study.text``): beyond any file system's time step."""
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"


class ServerSetupError(CuebenchError):
    """The experiment directory cannot be served (no experiment, no assignment plan)."""


class Study:
    """Everything a request needs: the experiment, its folder, the response store and the server tables.

    Tables and secrets (cookie key, completion codes; ``server_secrets``) are created here,
    once, before the first request. Answers are written through ``answers`` (group commit, its own
    connection); each server thread reads through its own ``ResponseStore`` connection
    (``store``), since one connection shared by threads would mix their transactions.
    """

    def __init__(self, expdir: ExperimentDir, experiment: Experiment, db: ServerDB, secrets_file: ServerSecrets,
                 database: str | None = None):
        self.expdir = expdir
        self.experiment = experiment
        self.db = db
        self.secrets = secrets_file
        self.database = database
        self._move_secrets_out_of_the_database()
        self.answers = GroupCommit(lambda: ResponseStore(self.location), db.renew)
        for key in KEYS:
            secrets_file.get_or_create(key, new_key)
        db.address_key = self.derive_key  # rate limits store client addresses only as keyed digests
        for outcome in OUTCOMES:
            self.completion_code(outcome)
        self._local = threading.local()
        self._reported_stimuli: set[str] = set()
        self._report_lock = threading.Lock()
        self._faults: dict[str, str] = {}
        self._last_questionnaire: Questionnaire | None = None
        self._rendered_texts: dict[str, tuple[tuple[int, ...] | None, str, str]] = {}  # stamp, markdown, html
        self.questionnaire()
        self._sequences = lru_cache(maxsize=4096)(
            lambda group, code, session: tuple(participant_sequence(experiment, group, code, session)))

    def _move_secrets_out_of_the_database(self) -> None:
        """A folder served before secrets had a file of their own kept them in ``server_settings``:
        the admin password hash and the completion codes move into the secrets file, the old
        key is dropped for new ones (``renew_keys``: every copy of the folder from before holds
        it), and the database forgets them all."""
        legacy = self.db.take_settings(SECRET_KEYS)
        if not legacy:
            return
        self.secrets.update({k: v for k, v in legacy.items() if k not in KEYS}, only_missing=True)
        self.renew_keys()
        self.db.forget_settings(SECRET_KEYS)

    def renew_keys(self) -> None:
        """New cookie and derivation keys (``cuebench serve rotate-secret``, and the move out of an old
        database), and nothing made with the old ones stays valid: admin sessions end (a new
        generation too, for a cookie signed before), open consent forms and task pages stop
        working, and session tokens are retired. Participants go on by opening their link again:
        the resume map leads them to their session, with a new token; their answers are kept."""
        self.secrets.update({key: new_key() for key in KEYS})
        self.db.address_key = self.derive_key
        self.db.bump_admin_generation()
        self.db.retire_tokens()

    @property
    def cookie_key(self) -> str:
        """The key signing cookies, read on every request: ``cuebench serve rotate-secret`` takes effect at once."""
        return self.secrets.get("secret_key")

    @property
    def derive_key(self) -> bytes:
        """The key behind start tokens, start-form nonces and trial keys, read like ``cookie_key``."""
        return self.secrets.get("derive_key").encode()

    @property
    def location(self) -> str | Path:
        """Where responses and server tables live: a ``postgresql://`` URL or the folder's responses.sqlite."""
        return self.database or self.expdir.responses_file

    @property
    def store(self) -> ResponseStore:
        if getattr(self._local, "store", None) is None or not self._local.store.database.usable:
            self._local.store = ResponseStore(self.location)
        return self._local.store

    def sequence(self, participant: Participant) -> list[ScheduledTrial]:
        """The participant's trial sequence (``cuebench.counterbalance.participant_sequence``), cached."""
        return list(self._sequences(participant.group, participant.code, participant.session))

    def start_token(self, identity: str) -> str:
        """The session token for a start request's identity (``participant._start_identity``): the
        same request again gives the same token; unguessable without the server's current key."""
        return hmac.new(self.derive_key, b"start:" + identity.encode(), hashlib.sha256).hexdigest()[:32]

    def start_nonce(self, browser: str) -> str:
        """A one-time id for a start form, bound to the browser's id: random half, MAC half."""
        token = secrets.token_hex(8)
        return token + self._nonce_mac(token, browser)

    def nonce_matches(self, nonce: str, browser: str) -> bool:
        """Whether ``nonce`` was made by ``start_nonce`` for this browser."""
        mac = self._nonce_mac(nonce[:16], browser)
        return len(nonce) == 32 and hmac.compare_digest(nonce[16:].encode(), mac.encode())

    def _nonce_mac(self, token: str, browser: str) -> str:
        return hmac.new(self.derive_key, f"nonce:{token}:{browser}".encode(), hashlib.sha256).hexdigest()[:16]

    def trial_key(self, trial_id: str) -> str:
        """An opaque stand-in for a trial id in the browser: ids may name the condition or the
        category, which a participant must not be able to read in the page."""
        return hmac.new(self.derive_key, trial_id.encode(), hashlib.sha256).hexdigest()[:20]

    def texts(self) -> dict[str, str]:
        """The study's texts as HTML, as the folder has them now: an edit shows at the next page load."""
        return {name: self.text(name) for name in TEXT_NAMES}

    def text(self, name: str) -> str:
        """One of the study's texts as HTML (:meth:`texts`); a folder served before the text existed gets its
        default. Rendered again only when the file changed: reading and rendering every text on each consent
        page and plan was most of their cost when participants arrive together. An unchanged ``stat`` says
        so; a file changed within ``TEXT_SETTLE_NS`` of its last reading is read again each time until it is
        older (a second edit within one tick of the file system's clock leaves the same times), and rendered
        again only if its words differ (a study served right after its build has texts that young)."""
        language = self.experiment.language
        path = text_path(self.expdir, name, language)
        try:
            stat = path.stat()
        except FileNotFoundError:
            write_default_texts(self.expdir, self.experiment)
            stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
        cached = self._rendered_texts.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[2]
        settled = time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > TEXT_SETTLE_NS
        markdown = path.read_text(encoding="utf-8")
        html = cached[2] if cached is not None and cached[1] == markdown else to_html(markdown)
        self._rendered_texts[name] = (stamp if settled else None, markdown, html)
        return html

    def say(self, key: str, **values) -> str:
        """A participant's words in the study's language (``cuebench.words``)."""
        return say(key, self.experiment.language, **values)

    def closed(self, rules) -> bool:
        """Whether the study has reached its recruitment target with finished sessions alone
        (``study_rules.StudyRules.full``): latecomers then see the closed page before any consent. Read from
        the place counts (``db.ServerDB.places``), kept as sessions finish and exclusions change, never by
        counting the study's sessions: the consent page costs the same at 100 sessions as at 20,000."""
        return rules.full(self.db.held_places(self.n_groups))

    def questionnaire(self) -> Questionnaire | None:
        """The study's questionnaire (``texts/questionnaire.json``), read like the texts on each call. A live
        edit that breaks the file never reaches a participant: the last valid version goes on being served,
        and the fault is logged once and shown on the admin page (``faults``) until the file is fixed."""
        try:
            self._last_questionnaire = load_questionnaire(self.expdir)
        except QuestionnaireError as err:
            where = str(err).replace(f"{self.expdir.root}{os.sep}", "")  # texts/questionnaire.json: ...
            self.report_fault(QUESTIONNAIRE_FILE, f"{where}; participants get the last valid version until it is "
                                                  "fixed")
            return self._last_questionnaire
        self.report_fault(QUESTIONNAIRE_FILE, None)
        return self._last_questionnaire

    def report_fault(self, name: str, fault: str | None) -> None:
        """Record (or, with None, clear) what is wrong with a file of the study's folder; a new fault is
        logged once, not once per request."""
        with self._report_lock:
            if self._faults.get(name) == fault:
                return
            if fault is None:
                self._faults.pop(name, None)
                log.warning("texts/%s is valid again", name)
                return
            self._faults[name] = fault
        log.error("%s", fault)

    def faults(self) -> dict[str, str]:
        """File name -> what is wrong with it now (the admin page shows them)."""
        with self._report_lock:
            return dict(self._faults)

    @property
    def display(self) -> dict | None:
        """The stimulus size in degrees of visual angle the experiment was built for, if any: the web
        task then calibrates the screen and draws the images at that size."""
        return self.experiment.provenance.get("display")

    @cached_property
    def stimulus_names(self) -> frozenset[str]:
        """The file names under ``stimuli/`` of the experiment's stimuli (what ``/stimuli/<name>`` serves)."""
        return frozenset(s.path.split("/", 1)[1] for s in self.experiment.stimuli.values())

    @cached_property
    def shown_together(self) -> frozenset[str]:
        """The file names of stimuli that a trial shows beside others (an oddity triplet): served so
        that their sizes cannot tell them apart (``participant._uniform_png``)."""
        return frozenset(self.experiment.stimuli[s].path.split("/", 1)[1]
                         for t in self.experiment.trials if len(t.stimuli) > 1 for s in t.stimuli)

    @cached_property
    def grid(self) -> ResponseGrid:
        """The classification response screen, the lab's (``human_tasks.layout``)."""
        return response_grid(self.experiment.label_set)

    @property
    def n_groups(self) -> int:
        return len(self.experiment.assignment.groups)

    def completion_code(self, outcome: str) -> str:
        """The code for a final status: set by ``--code-*`` or made once at random and kept."""
        if outcome not in OUTCOMES:
            raise ValueError(f"no completion code for status {outcome!r}")
        return self.secrets.get_or_create(f"code_{outcome}", lambda: "C" + secrets.token_hex(4).upper())

    def close(self) -> None:
        """Close this thread's connections (the server processes open their own)."""
        self.answers.store.close()
        self.db.close()
        if getattr(self._local, "store", None) is not None:
            self._local.store.close()
            self._local.store = None

    def first_report(self, stimulus: str) -> bool:
        """True the first time (in this process) a stimulus is reported unservable: it is logged once,
        not once per participant and retry."""
        with self._report_lock:
            first = stimulus not in self._reported_stimuli
            self._reported_stimuli.add(stimulus)
            return first

    def free_disk_mb(self) -> int | None:
        """Free space (MB) on the disk of responses.sqlite; None on PostgreSQL (its server's disk)."""
        if self.database is not None:
            return None
        return shutil.disk_usage(self.expdir.responses_file.parent).free // 2**20

    def missing_indices(self, participant: Participant) -> list[int]:
        answered = self.store.answered_indices(self.experiment.name, participant.code, participant.session)
        return [s.index for s in self.sequence(participant) if s.index not in answered]


def open_study(expdir: str | Path, clock: Callable[[], float] = time.time,
               reservation_seconds: float = RESERVATION_SECONDS, database: str | None = None,
               secrets_path: str | Path | None = None, hold_seconds: float = HOLD_SECONDS) -> Study:
    """The study of an experiment folder; ``database`` (a ``postgresql://`` URL) holds its
    responses and server tables instead of the folder's responses.sqlite; ``secrets_path``
    is the secrets file (default: ``server_secrets.default_secrets_path``); ``hold_seconds``: how long a new
    session holds its place before its first answer (``serve --hold-minutes``)."""
    folder = ExperimentDir(expdir)
    if not folder.exists():
        raise ServerSetupError(f"{folder.experiment_file}: no experiment.json; build an experiment first")
    experiment = folder.load()
    refuse_for_people(experiment, "cuebench serve")
    try:
        for trial in experiment.trials:
            check_served(trial)
    except UnservedTrialType as err:
        raise ServerSetupError(f"{folder.experiment_file}: {err}") from None
    check_stimulus_files(folder, experiment)
    write_default_texts(folder, experiment)  # a folder built before the texts existed gets them on first serve
    try:
        load_questionnaire(folder)
    except QuestionnaireError as err:
        raise ServerSetupError(str(err)) from None
    if experiment.assignment is None:
        raise ServerSetupError(f"{folder.experiment_file}: field 'assignment' is missing; the server needs an "
                               "assignment plan to put participants into groups")
    if database is not None and not is_database_url(database):
        raise ServerSetupError(f"--database {database!r}: expected a postgresql://USER@HOST/DB URL")
    db = ServerDB(database or folder.responses_file, experiment.name, clock=clock,
                  reservation_seconds=reservation_seconds, hold_seconds=hold_seconds)
    secrets_file = ServerSecrets(secrets_path or default_secrets_path(folder.root))
    return Study(folder, experiment, db, secrets_file, database)


def check_stimulus_files(folder: ExperimentDir, experiment: Experiment) -> None:
    """Refuse to serve when a stimulus experiment.json names is not a file inside the folder:
    a participant would wait on an image that never comes."""
    missing = []
    for stimulus in experiment.stimuli.values():
        try:
            present = folder.stimulus_path(stimulus).is_file()
        except OutsideExperimentError:
            present = False
        if not present:
            missing.append(stimulus.path)
    if missing:
        raise ServerSetupError(f"{folder.root}: {len(missing)} of the {len(experiment.stimuli)} stimulus files "
                               f"experiment.json names are missing or outside the folder, first "
                               f"{', '.join(sorted(missing)[:3])}; copy the whole experiment folder or build it again")


def study_of(app: Flask) -> Study:
    return app.extensions["cuebench"]
