"""A stand-in for OSF's API and its WaterButler file service, on loopback, recording what arrives.

OSF cannot be reached from the test machines, so ``cuebench archive`` is tested against this: the routes
``osfclient`` uses (GUID lookup, project, its storages, folder listings with each file's hashes, folder
creation, file upload and new versions), answering as OSF's v2 API and WaterButler document them
(developer.osf.io; waterbutler.readthedocs.io), holding files in memory. Every write is recorded as
``(method, path)`` so a test can say exactly what was sent.
"""

from __future__ import annotations

import hashlib
import itertools
import threading

from flask import Flask, abort, jsonify, request
from werkzeug.serving import make_server


class OSFStandIn:
    def __init__(self, project: str = "abc12", token: str = "secret-token"):
        self.project, self.token = project, token
        self.files: dict[str, bytes] = {}       # "/folder/name" -> content
        self.folders: set[str] = {"/"}          # "/folder/" paths
        self.writes: list[tuple[str, str]] = []  # (PUT kind, materialized path)
        self._ids = itertools.count(1)
        self.file_ids: dict[str, str] = {}
        self.app = self._make_app()
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()

    @property
    def api(self) -> str:
        return f"{self.base}/v2"

    def _wb(self, path: str) -> str:
        return f"{self.base}/wb/resources/{self.project}/providers/osfstorage{path}"

    def _listing(self, path: str) -> str:
        return f"{self.api}/nodes/{self.project}/files/osfstorage{path}"

    def _file(self, path: str) -> dict:
        content = self.files[path]
        fid = self.file_ids[path]
        return {"id": fid, "type": "files",
                "attributes": {"kind": "file", "name": path.rsplit("/", 1)[1], "path": f"/{fid}",
                               "materialized_path": path, "size": len(content), "date_created": None,
                               "date_modified": None,
                               "extra": {"hashes": {"md5": hashlib.md5(content).hexdigest(),
                                                    "sha256": hashlib.sha256(content).hexdigest()}}},
                "links": {"upload": self._wb(f"/{fid}"), "self": None, "html": None, "delete": self._wb(f"/{fid}")}}

    def _folder(self, path: str) -> dict:
        return {"id": path, "type": "files",
                "attributes": {"kind": "folder", "name": path.rstrip("/").rsplit("/", 1)[-1], "path": path,
                               "materialized_path": path, "date_created": None, "date_modified": None},
                "relationships": {"files": {"links": {"related": {"href": self._listing(path)}}}},
                "links": {"new_folder": self._wb(path) + "?kind=folder", "upload": self._wb(path), "self": None,
                          "delete": None, "move": None}}

    def _make_app(self) -> Flask:
        app = Flask("osf-standin")

        @app.before_request
        def authorised():
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                abort(401)

        @app.get("/v2/guids/<guid>/")
        def guid(guid):
            if guid != self.project:
                abort(404)
            return jsonify({"data": {"id": guid, "type": "nodes"}})

        @app.get("/v2/nodes/<guid>/")
        def node(guid):
            if guid != self.project:
                abort(404)
            return jsonify({"data": {"id": guid, "type": "nodes", "links": {"self": f"{self.api}/nodes/{guid}/"},
                                     "attributes": {"title": "stand-in", "date_created": None,
                                                    "date_modified": None, "description": ""},
                                     "relationships": {"files": {"links": {"related": {
                                         "href": f"{self.api}/nodes/{guid}/files/"}}}}}})

        @app.get("/v2/nodes/<guid>/files/")
        def storages(guid):
            storage = {**self._folder("/"), "id": f"{guid}:osfstorage"}
            storage["attributes"].update({"name": "osfstorage", "node": guid, "provider": "osfstorage"})
            return jsonify({"data": [storage], "links": {"next": None}})

        @app.get("/v2/nodes/<guid>/files/osfstorage/", defaults={"path": ""})
        @app.get("/v2/nodes/<guid>/files/osfstorage/<path:path>")
        def listing(guid, path):
            folder = "/" + path if path else "/"
            children = [self._file(p) for p in sorted(self.files) if p.rsplit("/", 1)[0] + "/" == folder]
            children += [self._folder(f) for f in sorted(self.folders)
                         if f != "/" and f.rstrip("/").rsplit("/", 1)[0] + "/" == folder]
            return jsonify({"data": children, "links": {"next": None}})

        @app.put("/wb/resources/<guid>/providers/osfstorage/", defaults={"path": ""})
        @app.put("/wb/resources/<guid>/providers/osfstorage/<path:path>")
        def write(guid, path):
            target = "/" + path
            by_id = {fid: p for p, fid in self.file_ids.items()}
            if target.lstrip("/") in by_id:  # a new version of a stored file
                stored = by_id[target.lstrip("/")]
                self.files[stored] = request.get_data()
                self.writes.append(("version", stored))
                return jsonify({"data": self._file(stored)}), 200
            name = request.args.get("name", "")
            if not name or target not in self.folders:
                abort(400)
            if request.args.get("kind") == "folder":
                created = f"{target}{name}/"
                if created in self.folders:
                    return jsonify({"message": "exists"}), 409
                self.folders.add(created)
                self.writes.append(("folder", created))
                return jsonify({"data": {"id": created, "attributes": {"path": created},
                                         "links": {"new_folder": self._wb(created) + "?kind=folder",
                                                   "upload": self._wb(created), "delete": None, "move": None}}}), 201
            created = f"{target}{name}"
            if created in self.files:
                return jsonify({"message": "exists"}), 409
            self.files[created] = request.get_data()
            self.file_ids[created] = f"f{next(self._ids)}"
            self.writes.append(("file", created))
            return jsonify({"data": self._file(created)}), 201

        return app
