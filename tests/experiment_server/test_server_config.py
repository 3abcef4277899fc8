"""`cuebench serve` with a bad setup: a clear message, exit status 2, and nothing created or changed."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket

import pytest

from cuebench_app.cli import main
from stimuli.web_sample import build_sample_experiment
from experiment_server.simulate import free_port
from experiment_server.study import open_study


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("config-template")
    build_sample_experiment(root)
    return root


@pytest.fixture()
def expdir(template, tmp_path):
    root = tmp_path / "exp"
    shutil.copytree(template, root)
    return root


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_port_in_use_is_refused_before_anything_is_created(expdir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(expdir), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}: it is in use" in capsys.readouterr().err
    assert not (expdir / "responses.sqlite").exists()


def test_experiment_without_assignment_plan(expdir, capsys):
    spec = json.loads((expdir / "experiment.json").read_text())
    spec.pop("assignment")
    (expdir / "experiment.json").write_text(json.dumps(spec))
    assert main(["serve", str(expdir), "--port", str(free_port())]) == 2
    assert "field 'assignment' is missing" in capsys.readouterr().err
    assert not (expdir / "responses.sqlite").exists()


def test_database_of_another_experiment_is_refused_and_left_alone(expdir, tmp_path, capsys):
    other = tmp_path / "other"
    build_sample_experiment(other, name="another-study")
    open_study(other).close()
    shutil.copy(other / "responses.sqlite", expdir / "responses.sqlite")
    before = digest(expdir / "responses.sqlite")
    assert main(["serve", str(expdir), "--port", str(free_port())]) == 2
    assert "belongs to experiment 'another-study', not 'web-sample'" in capsys.readouterr().err
    assert digest(expdir / "responses.sqlite") == before


def test_unreachable_database_url(expdir, capsys):
    url = "postgresql://cuebench:secret@127.0.0.1:1/study?connect_timeout=2"
    assert main(["serve", str(expdir), "--port", str(free_port()), "--database", url]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to postgresql://cuebench:***@127.0.0.1:1/study" in err and "secret" not in err
    assert not (expdir / "responses.sqlite").exists()
    in_query = "postgresql://cuebench@127.0.0.1:1/study?connect_timeout=2&password=secret"
    assert main(["serve", str(expdir), "--port", str(free_port()), "--database", in_query]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to postgresql://cuebench@127.0.0.1:1/study?connect_timeout=2&password=***" in err
    assert "secret" not in err


def test_postgres_database_of_another_experiment_is_refused(expdir, tmp_path, postgres_url, capsys):
    other = tmp_path / "other"
    build_sample_experiment(other, name="another-study")
    open_study(other, database=postgres_url).close()
    assert main(["serve", str(expdir), "--port", str(free_port()), "--database", postgres_url]) == 2
    assert "belongs to experiment 'another-study', not 'web-sample'" in capsys.readouterr().err
    assert not (expdir / "responses.sqlite").exists()
