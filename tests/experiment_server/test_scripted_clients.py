"""A study driven by scripts instead of a browser, as a researcher pilots one on their own machine:
Python's ``requests`` (``http.cookiejar``, which never sends a ``Secure`` cookie over plain
HTTP, unlike chromium on loopback) takes part and logs in as admin against a real
``cuebench serve`` subprocess on 127.0.0.1; the server's actions (``admin-password``,
``codes --pilot``) and ``cuebench exclude`` run as commands from the study's folder, with the
options before or after the experiment directory.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from experiment_server.simulate import NONCE, ServerProcess, free_port, trial_answer
from stimuli.web_sample import build_sample_experiment
from support import fill_consent

pytestmark = pytest.mark.slow

PASSWORD = "a password for the scripted admin"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def cuebench(cwd: Path, *args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MPLBACKEND": "Agg"})
    assert (done.returncode == 0) == ok, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def take_part(base: str, code: str) -> dict:
    """Consent, start, every image and mask fetched, every trial posted, completion: what the web task does."""
    with requests.Session() as browser:
        consent = browser.get(f"{base}/", params={"code": code}, timeout=30)
        assert consent.status_code == 200
        assert all(not cookie.secure for cookie in browser.cookies), "a Secure cookie never comes back over http"
        started = browser.post(f"{base}/start", data={"consent": "yes", "code": code,
                                                      "start_nonce": NONCE.search(consent.text).group(1)},
                               allow_redirects=False, timeout=30)
        assert started.status_code == 303, started.text
        token = started.headers["Location"].rsplit("/", 1)[1]
        assert browser.get(f"{base}/task/{token}", timeout=30).status_code == 200
        plan = browser.get(f"{base}/api/session/{token}", timeout=30).json()
        images = 0
        for trial in plan["trials"]:
            for url in [*trial["images"], *([trial["mask"]] if trial["mask"] else [])]:
                image = browser.get(base + url, timeout=30)
                assert image.status_code == 200 and image.headers["Content-Type"] == "image/png", url
                assert image.content.startswith(b"\x89PNG")
                images += 1
            posted = browser.post(f"{base}/api/session/{token}/trial/{trial['index']}", json=trial_answer(trial),
                                  timeout=30)
            assert posted.status_code == 201, posted.text
        done = browser.post(f"{base}/api/session/{token}/complete", json={}, timeout=30)
        assert done.status_code == 200, done.text
        return {**done.json(), "code": plan["participant"], "trials": len(plan["trials"]), "images": images}


def admin_exclude(base: str, code: str, reason: str) -> str:
    """Log in with requests and press Exclude through the admin page's form (its CSRF token); the page after it."""
    with requests.Session() as admin:
        login_page = admin.get(f"{base}/admin/login", timeout=30)
        logged_in = admin.post(f"{base}/admin/login", timeout=30,
                               data={"password": PASSWORD, "csrf_token": CSRF.search(login_page.text).group(1)})
        assert logged_in.status_code == 200 and logged_in.url == f"{base}/admin/", logged_in.text[:300]
        assert code in logged_in.text
        excluded = admin.post(f"{base}/admin/exclude", timeout=30,
                              data={"code": code, "reason": reason, "csrf_token": CSRF.search(logged_in.text).group(1)})
        assert excluded.status_code == 200 and excluded.url == f"{base}/admin/", excluded.text[:300]
        return excluded.text


def participants(work: Path) -> dict[str, dict]:
    out = cuebench(work, "export", "exp", "--format", "participants", "--out", "people.csv")
    assert "people.csv" in out.stdout
    return {r["code"]: r for r in csv.DictReader(io.StringIO((work / "people.csv").read_text()))}


def excluded_rows(work: Path) -> dict[str, set[str]]:
    cuebench(work, "export", "exp", "--format", "csv", "--out", "responses.csv")
    marked: dict[str, set[str]] = {}
    for row in csv.DictReader(io.StringIO((work / "responses.csv").read_text())):
        marked.setdefault(row["observer"], set()).add(row["excluded"] + "|" + row["exclusion_reason"])
    return marked


def test_scripted_participants_and_admin_over_plain_http(tmp_path):
    work = tmp_path / "study"
    build_sample_experiment(work / "exp")
    fill_consent(work / "exp")
    cuebench(work, "serve", "admin-password", "--password-stdin", "exp", stdin=PASSWORD + "\n")
    pilot_code = cuebench(work, "serve", "codes", "exp", "-n", "1", "--pilot").stdout.strip()
    assert re.fullmatch(r"pilot-([a-z2-9]{4}-){3}[a-z2-9]{4}", pilot_code)
    server = ServerProcess(work / "exp", free_port(), log_file=tmp_path / "server.log")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        alice, bob, pilot = (take_part(base, code) for code in ("alice-0001", "bob-0002", pilot_code))
        page = admin_exclude(base, alice["code"], "knew the photos")
    finally:
        server.stop()
    assert alice["status"] == bob["status"] == pilot["status"] == "finished"
    assert alice["images"] >= alice["trials"] > 0
    assert f"admin: knew the photos" in page

    people = participants(work)
    assert (people[alice["code"]]["excluded"], people[alice["code"]]["excluded_by"]) == ("1", "admin")
    assert [people[p["code"]]["observer_kind"] for p in (alice, bob, pilot)] == ["human", "human", "pilot"]
    assert people[pilot["code"]]["entry_code"] == pilot_code

    # the same exclusion from the command line, taken back, for a web participant
    said = cuebench(work, "exclude", "exp", bob["code"], "--reason", "typed at random", "--yes").stdout
    assert bob["code"] in said and "typed at random" in said
    marked = excluded_rows(work)
    assert marked[bob["code"]] == {f"1|cli ({_user()}): typed at random"}
    assert marked[alice["code"]] == {"1|admin: knew the photos"}
    cuebench(work, "exclude", "--undo", "exp", bob["code"], "--reason", "wrong person", "--yes")
    assert excluded_rows(work)[bob["code"]] == {"0|"}
    assert "did you mean" in cuebench(work, "exclude", "exp", bob["code"][:-1] + "Z", "--reason", "x", "--yes", ok=False).stderr
    assert "needs a reason" in cuebench(work, "exclude", "exp", alice["code"], ok=False).stderr
    log = cuebench(work, "exclude", "exp").stdout
    assert "1 observer(s) excluded now" in log and "wrong person" in log


def _user() -> str:
    import getpass

    return getpass.getuser()
