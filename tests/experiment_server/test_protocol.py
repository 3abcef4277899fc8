"""The study protocol as a researcher runs it: documented commands as subprocesses from a fresh folder with
relative paths. Texts that contradict a rebuilt experiment stop ``serve`` and ``lab run`` with the lines to fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import check_photo_folder

SHUFFLE = ("--design", "suppression", "--conditions", "channel_shuffle", "--workers", "1")


def cuebench(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "MPLBACKEND": "Agg"})
    assert (done.returncode == 0) == ok, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_a_rebuild_with_a_time_limit_rewrites_unedited_texts_and_stops_serve_and_lab_run_at_an_edited_one(tmp_path):
    cuebench(tmp_path, "stimuli", "build", "--out", "exp", *SHUFFLE)
    consent = tmp_path / "exp" / "texts" / "consent.md"
    consent.write_text(consent.read_text() + "\nEthics approval E-42.\n")
    check_photo_folder(tmp_path / "checks", {"cat": ("chelsea",), "coffee": ("coffee",)})
    rebuilt = cuebench(tmp_path, "stimuli", "build", "--out", "exp", *SHUFFLE, "--practice", "2",
                       "--check-images", "checks", "--timing", "response=2000")
    assert "rewrote instructions.md (unedited defaults)" in rebuilt.stderr and "edited consent.md" in rebuilt.stderr
    instructions = (tmp_path / "exp" / "texts" / "instructions.md").read_text()
    assert "You have 2 seconds to answer" in instructions and "The first 2 trials are practice." in instructions
    for command in (("serve", "exp"), ("lab", "run", "exp", "--participant", "P01", "--simulate")):
        refused = cuebench(tmp_path, *command, ok=False).stderr
        assert 'texts/consent.md:3: "no time limit", but the answer must come within 2 seconds' in refused
        assert "--allow-text-mismatch" in refused and "instructions.md" not in refused


def test_a_misspelt_option_gets_did_you_mean_and_serve_help_shows_no_empty_defaults(capsys):
    from cuebench_app.cli import main

    with pytest.raises(SystemExit):
        main(["stimuli", "build", "--out", "exp", *SHUFFLE, "--practise", "2"])
    assert "unrecognized arguments: --practise 2 (did you mean --practice?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in shown and "(default: False)" not in shown and "(default: 127.0.0.1)" in shown
