"""A researcher's whole pilot, as the README tells it: every step a `cuebench` subprocess run
from a fresh working folder with relative paths, participants in a real chromium, loopback only.

photos/<class>/ (folder names matched to ImageNet classes at build time) -> build with a size in
degrees -> edit the consent text, add a questionnaire -> serve -> two Prolific participants (one
reloads mid-block), one told before consent to enlarge her window and a phone refused before consent ->
the admin excludes one, takes it back (the person counts again), excludes again -> a model answers
without --mapping -> report, analyze and every export: the excluded person is absent from every human statistic and marked in every export. Served again
with a recruitment target already reached, a latecomer gets the closed page.
A DiST oddity study is taken the same way. Screenshots of what participants see go to
``$CUEBENCH_SCREENSHOTS/<study>/`` when that is set (else the test's temporary folder).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from cuebench.counterbalance import participant_sequence
from cuebench.expdir import ExperimentDir
from stimuli.sources import default_images
from support import check_photo_folder, fill_consent

pytestmark = pytest.mark.slow

CLASS_FOLDERS = {"camera": "camera", "cat": "cat", "coffee": "coffee mug", "rocket": "missile"}
"""Default photo category -> the folder a researcher names it by (an ImageNet class name the build matches)."""
EXPDIR = "exp/pilot"
PASSWORD = "a long pilot password"
CONSENT_ADDITION = "Ethics approval E-42 of the university board."
QUESTIONNAIRE = {"questions": [
    {"id": "age", "kind": "number", "prompt": "Your age in years", "required": True, "min": 18, "max": 99},
    {"id": "comments", "kind": "text", "prompt": "Anything else?"}]}
DISPLAY = ("--stimulus-degrees", "6", "--viewing-distance", "57", "--screen-width", "53")
CARD_SLIDER_PX, DISTANCE_CM = 400, 60
SESSION_DEADLINE_S = 150
PERSON_RT_MS = 150
"""How long the scripted participant looks before answering: faster than a person can respond (100 ms,
``experiment_server.plausibility``) is marked for review."""
RELOAD_AT_INDEX = 2
STATISTICS_EXEMPT = {"exclusions", "excluded_observers", "exclusion_summary"}
"""Report tables that list who was left out (the only places the excluded person may appear)."""
DIST_PHOTOS = 4
REPO_WORDS = Path(__file__).resolve().parents[2] / "cuebench" / "words"


def cuebench(cwd: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(base: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read()
        try:
            with urllib.request.urlopen(f"{base}/", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the server at {base} did not answer within 60 s")


class Served:
    """``cuebench serve EXPDIR`` from the study's folder, as the README runs it."""

    def __init__(self, work: Path, expdir: str, *options: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([sys.executable, "-m", "cuebench", "serve", expdir, "--port", str(self.port),
                                         *options],
                                        cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> "Served":
        wait_until_up(self.base, self.process)
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def screenshot_folder(tmp_path: Path, study: str) -> Path:
    """``$CUEBENCH_SCREENSHOTS/<study>`` (kept for a person to look at), else the test's temporary folder."""
    root = Path(os.environ["CUEBENCH_SCREENSHOTS"]) if os.environ.get("CUEBENCH_SCREENSHOTS") else tmp_path / "shots"
    folder = root / study
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def state(page) -> tuple[str, int | None]:
    data = page.evaluate("() => [document.body?.dataset.state || '', document.body?.dataset.trialIndex || '']")
    return data[0], int(data[1]) if data[1] else None


def shoot(page, shots: Path | None, name: str, full_page: bool = False) -> None:
    if shots and not (shots / name).exists():
        page.screenshot(path=str(shots / name), full_page=full_page)


def calibrate(page, shots: Path | None) -> None:
    """The card matched at CARD_SLIDER_PX CSS px, the viewing distance typed."""
    page.eval_on_selector("#card-size", f"el => {{ el.value = {CARD_SLIDER_PX}; el.dispatchEvent(new Event('input')); }}")
    page.fill("#distance", str(DISTANCE_CM))
    shoot(page, shots, "3-calibration.png")
    page.click("#continue")


def answer_questionnaire(page, shots: Path | None) -> None:
    page.fill("[name=q-age]", "34")
    page.fill("[name=q-comments]", "the images were small")
    shoot(page, shots, "6-questionnaire.png", full_page=True)
    page.click("#continue")


def take_part(page, base: str, entry: str, shots: Path | None = None, reload_at: int | None = None) -> dict:
    """Consent, instructions, calibration, every trial (the attention trial as instructed, oddity
    trials with key 1), the questionnaire, until the code shows. Returns the progress texts seen per
    trial index, the stimulus URLs the browser loaded and what the pages said."""
    loaded: dict[str, int] = {}
    page.on("response", lambda r: loaded.__setitem__(r.url, r.status) if "/stimuli/" in r.url else None)
    page.goto(f"{base}/?{entry}")
    shoot(page, shots, "1-consent.png", full_page=True)
    consent = page.inner_text("#consent-text")
    page.check("#consent")
    page.click("#start")
    progress: dict[int, str] = {}
    instructed, answered, reloaded, instructions, grid, questioned = None, set(), False, None, None, False
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while time.monotonic() < deadline:
        now, index = state(page)
        if now in ("instructions", "fullscreen", "break", "instruction", "image-failed") and \
                page.is_visible("#continue"):
            # image-failed: a restart outlasting the image retries (a loaded machine) asks the person to reload
            if now == "instructions" and instructions is None:
                instructions = page.inner_text("#screen")
                shoot(page, shots, "2-instructions.png", full_page=True)
            if now == "instruction":
                text = page.inner_text("#instruction")  # “B” or „B“, or the sample study's "Please click B."
                instructed = (re.findall("[\u201c\u201e]([^\u201c\u201d\u201e]+)[\u201c\u201d]", text)
                              or re.findall(r"click (\w+)", text))[-1]
            page.click("#continue")
        elif now == "calibration" and page.is_visible("#card"):
            calibrate(page, shots)
        elif now == "questionnaire" and page.is_visible("#questionnaire") and not questioned:
            answer_questionnaire(page, shots)
            questioned = True
        elif now == "stimulus":
            shoot(page, shots, "4-trial-image.png")
        elif now == "response-grid" and index not in answered:
            progress[index] = page.inner_text("#progress")
            grid = grid or page.eval_on_selector_all("#grid button", "buttons => buttons.map(b => b.textContent)")
            shoot(page, shots, "5-trial-answer-with-progress.png")
            page.wait_for_timeout(PERSON_RT_MS)
            page.click(f"#grid button[data-label='{instructed or 'cat'}']")
            instructed = None
            answered.add(index)
        elif now == "response-keys" and index not in answered:
            progress[index] = page.inner_text("#progress")
            shoot(page, shots, "4-trial-images-with-progress.png")  # the triplet shows from this state on
            page.wait_for_timeout(PERSON_RT_MS)
            page.keyboard.press("1")
            answered.add(index)
        elif now == "iti" and index == reload_at and not reloaded:
            page.reload()
            reloaded = True
        elif now == "done":
            shoot(page, shots, "7-completion.png", full_page=True)
            return {"progress": progress, "loaded": loaded, "consent": consent, "reloaded": reloaded,
                    "instructions": instructions, "status": page.get_attribute("#code", "data-status"),
                    "page": page.inner_text("#screen"), "grid": grid}
        time.sleep(0.02)
    raise AssertionError(f"{entry}: the session did not finish within {SESSION_DEADLINE_S} s (last state {state(page)})")


def prolific(pid: str) -> str:
    return f"PROLIFIC_PID={pid}&STUDY_ID=pilotstudy&SESSION_ID=s-{pid[:6]}"


def admin_action(page, base: str, code: str, button: str, reason: str) -> None:
    row = page.locator(f"#participants tr[data-code='{code}']")
    row.locator("input[name=reason]").fill(reason)
    row.locator("button", has_text=button).click()
    page.wait_for_url(f"{base}/admin/")


def make_photo_folder(root: Path) -> None:
    """One sub-folder per class, named as a researcher would name the class."""
    for image in default_images():
        if image.category in CLASS_FOLDERS:
            folder = root / CLASS_FOLDERS[image.category]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image.read()).save(folder / f"{image.name}.png")


def read_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open(encoding="utf-8")))


def people_of(work: Path) -> dict[str, dict]:
    cuebench(work, "export", EXPDIR, "--format", "participants", "--out", "out/people.csv")
    return {r["entry_code"] or r["prolific_pid"]: r for r in read_csv(work / "out/people.csv")}


def test_researcher_journey(tmp_path, browser):
    work = tmp_path / "study"
    make_photo_folder(work / "photos")
    shots = screenshot_folder(tmp_path, "suppression")

    cuebench(work, "stimuli", "build", "--design", "suppression", "--images", "photos", "--out", EXPDIR,
             "--grid", "human", "--workers", "1", *DISPLAY)
    consent_file = fill_consent(work / EXPDIR) / "texts" / "consent.md"
    consent_file.write_text(consent_file.read_text() + f"\n{CONSENT_ADDITION}\n")
    (work / EXPDIR / "texts" / "questionnaire.json").write_text(json.dumps(QUESTIONNAIRE))
    cuebench(work, "serve", "admin-password", "--password-stdin", EXPDIR, stdin=PASSWORD + "\n")
    alice_pid, bob_pid = "a" * 24, "b" * 24

    with Served(work, EXPDIR) as served:
        base = served.base
        alice = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), base, prolific(alice_pid), shots)
        bob = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), base, prolific(bob_pid),
                        reload_at=RELOAD_AT_INDEX)
        carol = browser.new_page(viewport={"width": 640, "height": 480})  # told what to change before consent
        carol.goto(f"{base}/?code=carol")
        assert "at least 800 \u00d7 600" in carol.inner_text("#device-fix") and not carol.is_visible("#consent")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True).new_page()
        phone.goto(f"{base}/?code=dave")  # a phone: refused before consent, with what to use instead
        assert "use a computer" in phone.inner_text("#device-fix") and not phone.is_visible("#consent")
        people = people_of(work)
        excluded = people[alice_pid]["code"]

        admin = browser.new_page(viewport={"width": 1400, "height": 900})
        admin.goto(f"{base}/admin/login")
        admin.fill("input[name=password]", PASSWORD)
        admin.click("button[type=submit]")
        admin.wait_for_url(f"{base}/admin/")
        admin_action(admin, base, excluded, "Exclude", "said she had seen the photos before")
        assert people_of(work)[alice_pid]["excluded"] == "1"
        admin_action(admin, base, excluded, "Un-exclude", "wrong person")
        # taken back: she counts again, in the exports and in the analysis
        assert (people_of(work)[alice_pid]["excluded"], people_of(work)[alice_pid]["exclusion_reason"]) == ("0", "")
        assert excluded in cuebench(work, "analyze", EXPDIR, "--metric", "observers")
        assert "yes:" not in admin.inner_text(f"#participants tr[data-code='{excluded}'] td.excluded")
        admin_action(admin, base, excluded, "Exclude", "said she had seen the photos before")
        admin.screenshot(path=str(shots / "8-admin.png"), full_page=True)

    # the participants' side: the researcher's texts, every image served, progress shown
    experiment = ExperimentDir(work / EXPDIR).load()
    assert CONSENT_ADDITION in alice["consent"]
    assert alice["status"] == bob["status"] == "finished" and "carol" not in people_of(work)
    assert bob["reloaded"] and "Thank you!" in alice["page"]
    assert "covered by noise" in alice["instructions"] and "There is no feedback." in alice["instructions"]
    people = people_of(work)
    for who, seen in ((alice_pid, alice), (bob_pid, bob)):
        sequence = participant_sequence(experiment, int(people[who]["group"]), people[who]["code"])
        stimuli = {experiment.stimuli[s].path.rsplit("/", 1)[1] for t in sequence
                   for s in experiment.trial(t.trial_id).stimuli}
        assert {url.rsplit("/", 1)[1] for url, status in seen["loaded"].items() if status in (200, 304)} >= stimuli
        assert people[who]["viewing_distance_cm"] == f"{DISTANCE_CM:.1f}" and people[who]["q_age"] == "34"
        if who == alice_pid:
            assert seen["progress"] == {t.index: f"trial {k} of {len(sequence)}" for k, t in enumerate(sequence, 1)}

    # the exclusion: stored once, with its history, and read by every export
    reason = "admin: said she had seen the photos before"
    assert (people[alice_pid]["excluded"], people[alice_pid]["excluded_by"]) == ("1", "admin")
    assert people[bob_pid]["excluded"] == "0" and float(people[bob_pid]["duration_s"]) > 0
    assert [label for label, _ in experiment.label_set.imagenet_indices.items()] and \
        set(experiment.label_set.imagenet_indices) == set(CLASS_FOLDERS.values())
    cuebench(work, "eval", "--experiment", EXPDIR, "--model", "tf_efficientnet_lite0:pypi", "--device", "cpu")
    cuebench(work, "report", EXPDIR)
    reports = work / EXPDIR / "reports"  # they name the experiment as the command did, nothing of this machine
    assert json.loads((reports / "provenance.json").read_text())["sources"][0]["path"] == EXPDIR
    assert str(work) not in (reports / "report.html").read_text()
    for fmt, out in (("csv", "out/responses.csv"), ("parquet", "out/responses.parquet"), ("mvh", "out/mvh"),
                     ("psychopy", "out/psychopy.csv"), ("prolific", "out/prolific.csv"),
                     ("questionnaire", "out/questionnaire.csv")):
        cuebench(work, "export", EXPDIR, "--format", fmt, "--out", out)
    common = pd.read_csv(work / "out/responses.csv", dtype=str)
    parquet = pd.read_parquet(work / "out/responses.parquet")
    for table in (common, parquet):
        mine = table[table["observer"] == excluded]
        assert len(mine) and set(mine["excluded"].astype(int)) == {1} and set(mine["exclusion_reason"]) == {reason}
        assert set(table.loc[table["observer"] == people[bob_pid]["code"], "excluded"].astype(int)) == {0}
    psychopy = pd.read_csv(work / "out/psychopy.csv", dtype=str)
    assert set(psychopy.loc[psychopy["participant"] == excluded, "exclusion_reason"]) == {reason}
    mvh = {p.relative_to(work / "out/mvh").parts[0] for p in (work / "out/mvh").rglob(f"*{excluded}*.csv")}
    assert mvh == {"excluded"}
    assert {r["participant_id"]: (r["action"], r["reason"]) for r in read_csv(work / "out/prolific.csv")} == {
        alice_pid: ("review", reason), bob_pid: ("approve", "finished")}
    answers = {r["observer"]: r for r in read_csv(work / "out/questionnaire.csv")}
    assert (answers[excluded]["excluded"], answers[excluded]["exclusion_reason"], answers[excluded]["q_age"]) == \
        ("1", reason, "34")
    assert answers[people[bob_pid]["code"]]["excluded"] == "0"

    # ... and by every human statistic: the report's tables, results.json and `cuebench analyze`
    tables = reports / "tables"
    for table in sorted(tables.glob("*.csv")):
        if table.stem not in STATISTICS_EXEMPT:
            assert excluded not in table.read_text(), f"{table.name} counts the excluded participant"
    results = json.loads((reports / "results.json").read_text())
    counted = {name: table for name, table in results["tables"].items() if name not in STATISTICS_EXEMPT}
    assert counted and excluded not in json.dumps(counted) and excluded not in json.dumps(results["summary"])
    assert excluded in json.dumps(results["tables"]["excluded_observers"])
    listed = pd.read_csv(tables / "excluded_observers.csv", dtype=str)
    assert dict(zip(listed["observer"], listed["reason"])) == {excluded: f"excluded: {reason}"}
    observers = cuebench(work, "analyze", EXPDIR, "--metric", "observers")
    assert excluded not in observers and people[bob_pid]["code"] in observers and "tf_efficientnet_lite0" in observers
    html = (reports / "report.html").read_text()
    assert "Excluded observers: who and why" in html and reason in html

    # served again with a target (after the report): bob counts, alice is excluded, so a latecomer gets the
    # researcher's closed page instead of the consent form
    with Served(work, EXPDIR, "--target-n", "1") as served:
        late = browser.new_page(viewport={"width": 1280, "height": 800})
        late.goto(f"{served.base}/?{prolific('e' * 24)}")
        assert "all the participants it needs" in late.inner_text("#closed") and not late.is_visible("#consent")


def test_a_dist_oddity_study_as_a_participant_takes_it(tmp_path, browser, shared):
    """The published DiST triplets (Wen et al. 2024), built with a size in degrees and taken in chromium:
    the instructions ask for the image that is different, trials answer with keys 1-3."""
    work = tmp_path / "study"
    release = shared / "data" / "dist"
    subset = work / "dist"
    keep = sorted(p.name for p in (release / "original").iterdir())[:DIST_PHOTOS]
    for folder in (p for p in release.iterdir() if p.is_dir()):
        (subset / folder.name).mkdir(parents=True)
        for name in keep:
            shutil.copy(folder / name, subset / folder.name / name)
    header, *rows = (release / "labels.csv").read_text().splitlines()
    (subset / "labels.csv").write_text("\n".join([header, *(r for r in rows if f"{r.split(',')[0]}.jpg" in keep)]))
    shots = screenshot_folder(tmp_path, "dist")
    cuebench(work, "stimuli", "build", "--design", "dist-import", "--images", "dist", "--out", "exp/dist", *DISPLAY)
    fill_consent(work / "exp/dist")
    with Served(work, "exp/dist") as served:
        seen = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), served.base, "code=dist1", shots)
    assert seen["status"] == "finished" and seen["progress"]
    assert "different from the other two" in seen["instructions"] and "noise" not in seen["instructions"]
    assert all(re.fullmatch(r"trial \d+ of \d+", text) for text in seen["progress"].values())


def test_a_german_study_as_a_participant_meets_it(tmp_path, browser):
    """``--language de``: the consent page (``lang``, consent text, checkbox, button, the device check's advice),
    instructions, progress counter, attention check and the completion page are German, with no sentence of the
    English catalogue on them; the texts sit in texts/de/."""
    work = tmp_path / "study"
    make_photo_folder(work / "photos")
    check_photo_folder(work / "checks", {"cat": ("chelsea",), "camera": ("camera",)})
    cuebench(work, "stimuli", "build", "--design", "suppression", "--images", "photos", "--out", "exp/de",
             "--grid", "human", "--workers", "1", "--practice", "1", "--check-images", "checks", "--language", "de")
    assert (work / "exp/de/texts/de/consent.md").read_text(encoding="utf-8").startswith("# Willkommen")
    english = [piece.strip() for text in json.loads((REPO_WORDS / "en.json").read_text(encoding="utf-8")).values()
               for piece in re.split(r"\{\w+\}", text) if len(piece.split()) >= 3]
    fill_consent(work / "exp/de")
    with Served(work, "exp/de") as served:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{served.base}/?code=de0")
        consent = page.inner_text("body")
        assert page.get_attribute("html", "lang") == "de"
        assert "Ich habe die Informationen oben gelesen" in consent and page.inner_text("#start") == "Starten"
        advice = page.evaluate("window.cuebenchDevice.deviceProblem({width: 500, height: 400, screen_width: 500, "
                               "screen_height: 400}, {fine: true, touch: false}).fix")
        assert advice.startswith("Bitte machen Sie das Browserfenster mindestens 800 × 600 Pixel groß")
        seen = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), served.base, "code=de1")
    assert seen["status"] == "finished"
    assert seen["instructions"].startswith("Anleitung") and "0,2 Sekunden" in seen["instructions"]
    assert "Weiter" in seen["instructions"]
    assert all(re.fullmatch(r"(Übung|Durchgang) \d+ von \d+", text) for text in seen["progress"].values())
    assert "Vielen Dank!" in seen["page"] and "Ihr Abschlusscode lautet" in seen["page"]
    assert "nicht erkennbar" in seen["grid"] and "not clear" not in seen["grid"]  # the stored answer stays "not clear"
    shown = " ".join([consent, advice, seen["instructions"], *seen["progress"].values(), seen["page"]])
    assert [piece for piece in english if piece in shown] == []
