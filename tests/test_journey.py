"""A researcher's whole pilot, as the README tells it: every step a `cuebench` subprocess run
from a fresh working folder with relative paths, participants in a real chromium, loopback only.

photos/<class>/ -> build -> edit the consent text -> serve -> two people take part (one
reloads mid-block) and one is screened out -> the admin excludes one, takes it back,
excludes again -> a model answers -> report, analyze and every export: the excluded person
is absent from every human statistic and marked in every export.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from cuebench.design import participant_sequence
from cuebench.expdir import ExperimentDir
from stimuli.sources import DEFAULT_LABEL_INDICES, default_images

pytestmark = pytest.mark.slow

CLASSES = ("camera", "cat", "coffee", "rocket")
EXPDIR = "exp/pilot"
PASSWORD = "a long pilot password"
CONSENT_ADDITION = "Ethics approval E-42 of the university board."
SESSION_DEADLINE_S = 120
RELOAD_AT_INDEX = 2
STATISTICS_EXEMPT = {"exclusions.csv", "excluded_observers.csv", "exclusion_summary.csv"}
"""Report tables that list who was left out (the only places the excluded person may appear)."""


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


def state(page) -> tuple[str, int | None]:
    data = page.evaluate("() => [document.body?.dataset.state || '', document.body?.dataset.trialIndex || '']")
    return data[0], int(data[1]) if data[1] else None


def take_part(page, base: str, entry: str, shots: Path | None = None, reload_at: int | None = None) -> dict:
    """Consent, instructions, every trial (the attention trial as instructed) until the code shows.
    Returns the progress texts seen per trial index and the stimulus URLs the browser loaded."""
    loaded: dict[str, int] = {}
    page.on("response", lambda r: loaded.__setitem__(r.url, r.status) if "/stimuli/" in r.url else None)
    page.goto(f"{base}/?code={entry}")
    if shots:
        page.screenshot(path=str(shots / "1-consent.png"), full_page=True)
    consent = page.inner_text("#consent-text")
    page.check("#consent")
    page.click("#start")
    progress: dict[int, str] = {}
    instructed, answered, reloaded = None, set(), False
    deadline = time.monotonic() + SESSION_DEADLINE_S
    while time.monotonic() < deadline:
        now, index = state(page)
        if now in ("instructions", "fullscreen", "break", "instruction") and page.is_visible("#continue"):
            if now == "instructions" and shots and not (shots / "2-instructions.png").exists():
                page.screenshot(path=str(shots / "2-instructions.png"))
            if now == "instruction":
                instructed = re.search(r"click \u201c(\w+)\u201d", page.inner_text("#instruction")).group(1)
            page.click("#continue")
        elif now == "response-grid" and index not in answered:
            progress[index] = page.inner_text("#progress")
            if shots and not (shots / "3-trial-with-progress.png").exists():
                page.screenshot(path=str(shots / "3-trial-with-progress.png"))
            page.click(f"#grid button[data-label='{instructed or 'cat'}']")
            instructed = None
            answered.add(index)
        elif now == "response-keys" and index not in answered:
            progress[index] = page.inner_text("#progress")
            if shots and not (shots / "3-trial-with-progress.png").exists():
                page.screenshot(path=str(shots / "3-trial-with-progress.png"))
            page.keyboard.press("1")
            answered.add(index)
        elif now == "iti" and index == reload_at and not reloaded:
            page.reload()
            reloaded = True
        elif now == "done":
            if shots:
                page.screenshot(path=str(shots / "4-completion.png"), full_page=True)
            return {"progress": progress, "loaded": loaded, "consent": consent, "reloaded": reloaded,
                    "status": page.get_attribute("#code", "data-status"), "page": page.inner_text("#screen")}
        time.sleep(0.02)
    raise AssertionError(f"{entry}: the session did not finish within {SESSION_DEADLINE_S} s (last state {state(page)})")


def admin_action(page, base: str, entry: str, button: str, reason: str) -> None:
    row = page.locator("#participants tr", has_text=entry)
    row.locator("input[name=reason]").fill(reason)
    row.locator("button", has_text=button).click()
    page.wait_for_url(f"{base}/admin/")


def make_photo_folder(root: Path) -> None:
    """One sub-folder per class, as a researcher's own photos arrive."""
    for image in default_images():
        if image.category in CLASSES:
            folder = root / image.category
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image.read()).save(folder / f"{image.name}.png")


def test_researcher_journey(tmp_path, browser):
    work = tmp_path / "study"
    make_photo_folder(work / "photos")
    (work / "mapping.json").write_text(json.dumps({c: DEFAULT_LABEL_INDICES[c] for c in CLASSES}))
    shots = tmp_path / "screenshots"
    shots.mkdir()

    cuebench(work, "stimuli", "build", "--design", "suppression", "--images", "photos", "--out", EXPDIR,
             "--grid", "human", "--workers", "1")
    consent_file = work / EXPDIR / "texts" / "consent.md"
    consent_file.write_text(consent_file.read_text() + f"\n{CONSENT_ADDITION}\n")
    cuebench(work, "serve", "admin-password", EXPDIR, "--password-stdin", stdin=PASSWORD + "\n")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "cuebench", "serve", EXPDIR, "--port", str(port)], cwd=work,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_up(base, server)
        alice = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), base, "alice", shots)
        bob = take_part(browser.new_page(viewport={"width": 1280, "height": 800}), base, "bob",
                        reload_at=RELOAD_AT_INDEX)
        carol = take_part(browser.new_page(viewport={"width": 640, "height": 480}), base, "carol")

        admin = browser.new_page(viewport={"width": 1400, "height": 900})
        admin.goto(f"{base}/admin/login")
        admin.fill("input[name=password]", PASSWORD)
        admin.click("button[type=submit]")
        admin.wait_for_url(f"{base}/admin/")
        admin_action(admin, base, "alice", "Exclude", "said she had seen the photos before")
        admin_action(admin, base, "alice", "Un-exclude", "wrong person")
        admin_action(admin, base, "alice", "Exclude", "said she had seen the photos before")
        admin.screenshot(path=str(shots / "5-admin.png"), full_page=True)
    finally:
        server.terminate()
        server.wait(timeout=30)

    # the participants' side: the researcher's consent text, every image served, progress shown
    experiment = ExperimentDir(work / EXPDIR).load()
    assert CONSENT_ADDITION in alice["consent"]
    assert alice["status"] == bob["status"] == "finished" and carol["status"] == "screened_out"
    assert bob["reloaded"] and "Thank you!" in alice["page"]
    people = {r["entry_code"]: r for r in csv.DictReader(open(
        Path(cuebench(work, "export", EXPDIR, "--format", "participants", "--out", "out/people.csv")
             .split("wrote ", 1)[1].strip())))}
    for who, seen in (("alice", alice), ("bob", bob)):
        sequence = participant_sequence(experiment, int(people[who]["group"]), people[who]["code"])
        stimuli = {experiment.stimuli[s].path.rsplit("/", 1)[1] for t in sequence
                   for s in experiment.trial(t.trial_id).stimuli}
        assert {url.rsplit("/", 1)[1] for url, status in seen["loaded"].items() if status in (200, 304)} >= stimuli
        if who == "alice":
            assert seen["progress"] == {t.index: f"trial {k} of {len(sequence)}" for k, t in enumerate(sequence, 1)}
    assert (people["carol"]["status"], people["carol"]["excluded_by"]) == ("screened_out", "browser check")

    # the exclusion: stored once, with its history, and read by every export
    excluded = people["alice"]["code"]
    assert (people["alice"]["excluded"], people["alice"]["excluded_by"]) == ("1", "admin")
    assert people["bob"]["excluded"] == "0" and float(people["bob"]["duration_s"]) > 0
    cuebench(work, "eval", "--experiment", EXPDIR, "--model", "tf_efficientnet_lite0:pypi", "--mapping",
             "mapping.json", "--device", "cpu")
    cuebench(work, "report", EXPDIR)
    reports = work / EXPDIR / "reports"  # they name the experiment as the command did, nothing of this machine
    assert json.loads((reports / "provenance.json").read_text())["sources"][0]["path"] == EXPDIR
    assert str(work) not in (reports / "report.html").read_text()
    for fmt, out in (("csv", "out/responses.csv"), ("parquet", "out/responses.parquet"), ("mvh", "out/mvh"),
                     ("psychopy", "out/psychopy.csv")):
        cuebench(work, "export", EXPDIR, "--format", fmt, "--out", out)
    reason = "admin: said she had seen the photos before"
    common = pd.read_csv(work / "out/responses.csv", dtype=str)
    parquet = pd.read_parquet(work / "out/responses.parquet")
    for table in (common, parquet):
        mine = table[table["observer"] == excluded]
        assert len(mine) and set(mine["excluded"].astype(int)) == {1} and set(mine["exclusion_reason"]) == {reason}
        assert set(table.loc[table["observer"] == people["bob"]["code"], "excluded"].astype(int)) == {0}
    psychopy = pd.read_csv(work / "out/psychopy.csv", dtype=str)
    assert set(psychopy.loc[psychopy["participant"] == excluded, "exclusion_reason"]) == {reason}
    mvh = {p.relative_to(work / "out/mvh").parts[0] for p in (work / "out/mvh").rglob(f"*{excluded}*.csv")}
    assert mvh == {"excluded"}

    # ... and by every human statistic: the report's tables and `cuebench analyze`
    tables = work / EXPDIR / "reports" / "tables"
    for table in sorted(tables.glob("*.csv")):
        if table.name not in STATISTICS_EXEMPT:
            assert excluded not in table.read_text(), f"{table.name} counts the excluded participant"
    listed = pd.read_csv(tables / "excluded_observers.csv", dtype=str)
    assert dict(zip(listed["observer"], listed["reason"])) == {
        excluded: f"excluded: {reason}", people["carol"]["code"]: "excluded: browser check: screen too small (640x480)"}
    observers = cuebench(work, "analyze", EXPDIR, "--metric", "observers")
    assert excluded not in observers and people["bob"]["code"] in observers and "tf_efficientnet_lite0" in observers
    html = (work / EXPDIR / "reports" / "report.html").read_text()
    assert "Excluded observers: who and why" in html and reason in html
