"""``cuebench archive EXPDIR --osf PROJECT``: the study's open-science outputs sent to an OSF project.

PsychoPy and DataPipe send data to OSF; here one command sends what a publication needs, made from the
study folder at the moment of sending: the Psych-DS dataset (:mod:`cuebench.psychds`, regenerated from the
database, so excluded people are marked, pilots apart and withdrawn people absent), the report folder (only
when it was made after the last withdrawal: an older report may still hold a withdrawn person), the
preregistration, and, when asked, the stimuli. Nothing else of the folder is read, so the secrets file (kept
beside the folder), the database and the server's records of client addresses never leave.

Uploads go through ``osfclient`` (token from ``OSF_TOKEN``), into one folder of the project's ``osfstorage``.
A second run is resumable: the project's files are listed once and a file whose MD5 equals the local one is
not sent again; a changed file is sent as a new version.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

OSF_API = "https://api.osf.io/v2"
TOKEN_VARIABLE = "OSF_TOKEN"
API_VARIABLE = "CUEBENCH_OSF_API"
"""The OSF API's base URL, for a self-hosted OSF or a stand-in (default :data:`OSF_API`)."""
STORAGE = "osfstorage"


class ArchiveError(CuebenchError):
    """The archive cannot be sent: no token, no such project, a stale report."""


@dataclass
class Sent:
    """What a run did, path by path (remote paths, ``/``-separated)."""

    uploaded: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def report_is_current(expdir: Path, reports: Path, database: str | None) -> bool:
    """Whether the report was made after the last withdrawal: it recorded as many withdrawals as there are now."""
    from analysis.load import withdrawal_count

    results = reports / "results.json"
    if not results.is_file():
        return False
    recorded = json.loads(results.read_text(encoding="utf-8")).get("summary", {}).get("withdrawals", 0)
    return recorded == withdrawal_count([expdir], database)


def staged_files(expdir: Path, stage: Path, *, authors: tuple[str, ...], license: str, prereg: Path | None,
                 stimuli: bool, database: str | None, sent: Sent) -> dict[str, Path]:
    """Remote path -> local file of everything to send, the dataset written into ``stage``."""
    from cuebench.export import export

    export(expdir, "psych-ds", stage / "dataset", database, authors=authors, license=license)
    if not stimuli:
        for image in sorted((stage / "dataset" / "materials" / "stimuli").glob("*")):
            image.unlink()
        sent.left_out.append("dataset/materials/stimuli (give --stimuli to send them)")
    files = {f"dataset/{p.relative_to(stage / 'dataset').as_posix()}": p
             for p in sorted((stage / "dataset").rglob("*")) if p.is_file()}
    reports = expdir / "reports"
    if report_is_current(expdir, reports, database):
        files.update({f"report/{p.relative_to(reports).as_posix()}": p for p in sorted(reports.rglob("*")) if p.is_file()})
    else:
        sent.left_out.append("report (none made since the last withdrawal: run cuebench report first)"
                             if reports.is_dir() else "report (none yet: run cuebench report first)")
    if prereg is not None:
        files[f"preregistration/{prereg.name}"] = prereg
    return files


def upload(files: dict[str, Path], project_id: str, folder: str, token: str, api: str, sent: Sent) -> None:
    """Send ``files`` under ``folder`` of the project's osfstorage, each file once (module docstring)."""
    from osfclient import OSF

    osf = OSF(token=token)
    osf.session.base_url = api.rstrip("/")
    try:
        storage = osf.project(project_id).storage(STORAGE)
    except Exception as err:  # osfclient raises RuntimeError/OSFException/HTTP errors alike
        raise ArchiveError(f"OSF project {project_id!r} cannot be opened at {api}: {err}") from None
    remote = {f.path.strip("/"): f for f in storage.files}
    folders = {"": storage}

    def folder_of(path: str):
        if path not in folders:
            parent, _, name = path.rpartition("/")
            folders[path] = folder_of(parent).create_folder(name, exist_ok=True)
        return folders[path]

    for rel, local in files.items():
        path = f"{folder}/{rel}"
        existing = remote.get(path)
        if existing is not None and existing.hashes.get("md5") == md5(local):
            sent.unchanged.append(path)
            continue
        with open(local, "rb") as handle:
            if existing is not None:
                existing.update(handle)
                sent.updated.append(path)
                continue
            parent, _, name = path.rpartition("/")
            target = folder_of(parent)
            response = target._put(target._new_file_url, params={"name": name}, data=handle.read())
        if response.status_code != 201:
            raise ArchiveError(f"OSF refused {path}: HTTP {response.status_code} {response.text[:200]}")
        sent.uploaded.append(path)


def archive(expdir: Path, project_id: str, *, authors: tuple[str, ...], license: str, prereg: Path | None = None,
            stimuli: bool = False, folder: str | None = None, database: str | None = None) -> Sent:
    """Stage and send the study's outputs (module docstring); returns what was sent, kept and left out."""
    from cuebench.expdir import ExperimentDir

    token = os.environ.get(TOKEN_VARIABLE)
    if not token:
        raise ArchiveError(f"set {TOKEN_VARIABLE} to a personal access token of OSF (osf.io/settings/tokens, "
                           "scope osf.full_write)")
    if prereg is not None and not prereg.is_file():
        raise ArchiveError(f"{prereg}: no such preregistration (cuebench prereg writes one)")
    name = folder or ExperimentDir(expdir).load().name
    sent = Sent()
    with tempfile.TemporaryDirectory(prefix="cuebench-archive-") as stage:
        files = staged_files(expdir, Path(stage), authors=authors, license=license, prereg=prereg, stimuli=stimuli,
                             database=database, sent=sent)
        upload(files, project_id, name, token, os.environ.get(API_VARIABLE, OSF_API), sent)
    return sent


def register(sub) -> None:
    parser = sub.add_parser(
        "archive", help="send the Psych-DS dataset, report, preregistration (and stimuli) to an OSF project",
        description=f"Token from {TOKEN_VARIABLE}. Sends only what changed since the last run (MD5); never the secrets "
                    "file, the database, withdrawn people or client addresses (cuebench_app.archive).")
    parser.add_argument("expdir", type=user_path, help="experiment directory")
    parser.add_argument("--osf", required=True, metavar="PROJECT", help="the OSF project's id (osf.io/PROJECT)")
    parser.add_argument("--author", action="append", default=[], required=True, metavar="NAME",
                        help="an author of the dataset (once per author)")
    parser.add_argument("--license", required=True, help="the data's licence, e.g. CC-BY-4.0")
    parser.add_argument("--prereg", type=user_path, default=None, help="the preregistration to send (cuebench prereg)")
    parser.add_argument("--stimuli", action="store_true", help="send the stimuli too (materials/stimuli)")
    parser.add_argument("--folder", default=None, help="the folder in osfstorage (default: the experiment's name)")
    parser.add_argument("--database", metavar="URL", help="postgresql://USER@HOST/DB holding the responses")
    parser.set_defaults(func=run)


def run(args) -> int:
    sent = archive(args.expdir, args.osf, authors=tuple(args.author), license=args.license, prereg=args.prereg,
                   stimuli=args.stimuli, folder=args.folder, database=args.database)
    for label, paths in (("sent", sent.uploaded), ("sent a new version of", sent.updated)):
        for path in paths:
            print(f"{label} {path}")
    print(f"{len(sent.uploaded)} sent, {len(sent.updated)} updated, {len(sent.unchanged)} unchanged "
          f"(same MD5 on OSF)")
    for what in sent.left_out:
        print(f"not sent: {what}")
    return 0
