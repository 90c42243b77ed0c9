"""A restic repository served over HTTP with restic's REST protocol (version 2), standard library only.

The e2e tier's stand-in for a remote backup store (restic's own rest-server is not served by the Go module
proxy here): files under a directory, HTTP basic authentication, what `restic init`, `backup`, `forget
--prune`, `snapshots` and `restore` ask for. Run as a pod (``python3 restic_rest.py DIR PORT``) with
``RESTIC_REST_USERNAME``/``RESTIC_REST_PASSWORD`` in its environment.

    POST /?create=true                 make the repository's directories
    HEAD|GET|POST /config              the repository's config file
    GET /<type>/                       list (v2: [{"name", "size"}], else [names])
    HEAD|GET|POST|DELETE /<type>/<id>  one file; GET honours `Range: bytes=a-b`
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TYPES = ("data", "keys", "locks", "snapshots", "index")
V2 = "application/vnd.x.restic.rest.v2"
NAME = re.compile(r"^[0-9a-f]{64}$")


class Handler(BaseHTTPRequestHandler):
    root: Path
    credentials: str  # "user:password"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.command} {self.path} -> {format % args}\n")

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        given = base64.b64decode(header[6:]).decode(errors="replace") if header.startswith("Basic ") else ""
        if hmac.compare_digest(given, self.credentials):
            return True
        self._reply(401, b"", {"WWW-Authenticate": 'Basic realm="restic"'})
        return False

    def _reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _target(self) -> tuple[str, Path | None] | None:
        """(type, file or None for the type's directory) of the request's path, or None when it names neither."""
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if parts == ["config"]:
            return "config", self.root / "config"
        if len(parts) == 1 and parts[0] in TYPES:
            return parts[0], None
        if len(parts) == 2 and parts[0] in TYPES and NAME.match(parts[1]):
            sub = parts[1][:2] if parts[0] == "data" else ""
            return parts[0], self.root / parts[0] / sub / parts[1]
        return None

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self) -> None:
        if not self._authorized():
            return
        if self.path.split("?", 1)[0] == "/" and "create=true" in self.path:
            for kind in TYPES:
                (self.root / kind).mkdir(parents=True, exist_ok=True)
            for i in range(256):
                (self.root / "data" / f"{i:02x}").mkdir(exist_ok=True)
            self._reply(200)
            return
        target = self._target()
        if target is None or target[1] is None:
            self._reply(400)
            return
        body = self._body()
        path = target[1]
        if target[0] != "locks" and path.exists():
            self._reply(403)  # append-only for everything but locks: a file is never overwritten
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(body)
        os.replace(tmp, path)
        self._reply(200)

    def _get(self, head: bool) -> None:
        if not self._authorized():
            return
        target = self._target()
        if target is None:
            self._reply(404, head=head)
            return
        kind, path = target
        if path is None:
            files = [p for p in (self.root / kind).rglob("*") if p.is_file() and NAME.match(p.name)]
            if V2 in self.headers.get("Accept", ""):
                listing: object = [{"name": p.name, "size": p.stat().st_size} for p in files]
                ctype = V2
            else:
                listing = [p.name for p in files]
                ctype = "application/vnd.x.restic.rest.v1"
            self._reply(200, json.dumps(listing).encode(), {"Content-Type": ctype}, head)
            return
        if not path.is_file():
            self._reply(404, head=head)
            return
        data = path.read_bytes()
        wanted = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if wanted:
            start = int(wanted.group(1))
            end = int(wanted.group(2)) if wanted.group(2) else len(data) - 1
            part = data[start : end + 1]
            headers = {"Content-Range": f"bytes {start}-{start + len(part) - 1}/{len(data)}"}
            self._reply(206, part, headers, head)
            return
        self._reply(200, data, {"Content-Type": "application/octet-stream"}, head)

    def do_GET(self) -> None:
        self._get(head=False)

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_DELETE(self) -> None:
        if not self._authorized():
            return
        target = self._target()
        if target is None or target[1] is None or not target[1].is_file():
            self._reply(404)
            return
        target[1].unlink()
        self._reply(200)


def main() -> None:
    root, port = Path(sys.argv[1]), int(sys.argv[2])
    Handler.root = root
    Handler.credentials = f"{os.environ['RESTIC_REST_USERNAME']}:{os.environ['RESTIC_REST_PASSWORD']}"
    root.mkdir(parents=True, exist_ok=True)
    ThreadingHTTPServer(("", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
