"""`python -m attnkit submit NOTEBOOK --url URL`: hand a notebook in to the course's submission service.

It uploads the notebook with your personal token (from --token-file, or ATTNKIT_TOKEN), waits while it
is graded (showing your place in the queue), then prints the same feedback as the web page: points per
function, the named mistake and the hint of each failed test. Standard library only: nothing of the
server is imported here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path


def multipart(fields: dict[str, str], name: str, filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with `fields` and one file; (body, content type)."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                 f"Content-Type: application/x-ipynb+json\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def call(url: str, token: str, body: bytes | None = None, content_type: str = "") -> tuple[int, dict]:
    """(HTTP status, JSON answer) of a request with the token."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {"error": exc.reason}


def read_token(args) -> str:
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return os.environ.get("ATTNKIT_TOKEN", "").strip()


def chapter_of(path: Path, given: str | None) -> str | None:
    """--chapter, else the notebook's metadata (course.chapter), else its file name's NN_name."""
    if given:
        return given
    import re
    try:
        chapter = json.loads(path.read_text()).get("metadata", {}).get("course", {}).get("chapter")
    except (OSError, ValueError, AttributeError):
        chapter = None
    match = re.search(r"(?<![0-9A-Za-z])\d\d_[a-z][a-z0-9_]*", path.stem)
    return chapter or (match.group(0) if match else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnkit submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", help="your notebook, e.g. exercises/02_attention.ipynb")
    parser.add_argument("--url", default=os.environ.get("ATTNKIT_SERVICE", ""),
                        help="the service's address, e.g. https://grader.example.edu (or ATTNKIT_SERVICE)")
    parser.add_argument("--token-file", help="a file holding your personal token (default: ATTNKIT_TOKEN)")
    parser.add_argument("--chapter", help="the assignment (NN_name) when the notebook does not say")
    parser.add_argument("--no-wait", action="store_true", help="hand in and return; read the feedback on the web page")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the feedback")
    args = parser.parse_args(argv)
    path, token, url = Path(args.notebook), read_token(args), args.url.rstrip("/")
    if not path.is_file():
        print(f"{path}: no such file", file=sys.stderr)
        return 2
    if not url or not token:
        print("give the service's address (--url or ATTNKIT_SERVICE) and your token (--token-file or "
              "ATTNKIT_TOKEN)", file=sys.stderr)
        return 2
    chapter = chapter_of(path, args.chapter)
    if not chapter:
        print("which assignment is this? give --chapter NN_name", file=sys.stderr)
        return 2
    body, kind = multipart({"chapter": chapter}, "notebook", path.name, path.read_bytes())
    try:
        status, answer = call(f"{url}/api/submit", token, body, kind)
    except (urllib.error.URLError, OSError) as exc:
        print(f"cannot reach {url}: {getattr(exc, 'reason', exc)}; nothing was handed in", file=sys.stderr)
        return 2
    if status != 201:
        print(answer.get("error", f"the service answered {status}"), file=sys.stderr)
        return 1
    print(f"handed in: attempt #{answer['id']} ({chapter}); {url}{answer['url']}")
    if args.no_wait:
        return 0
    return wait_for(url, token, answer["id"], args.wait)


def wait_for(url: str, token: str, sub_id: int, seconds: float) -> int:
    """Poll until graded; print the feedback. 0: full marks, 1: not, 3: not graded in time."""
    deadline, said = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        status, v = call(f"{url}/api/submissions/{sub_id}", token)
        if status == 200 and v.get("status") == "done":
            print(v["feedback"])
            return 0 if v["score"] and v["score"].split(" / ")[0] == v["score"].split(" / ")[1] else 1
        now = (f"queued: {v.get('place')} ahead of yours" if v.get("status") == "queued" else "being graded")
        if now != said:
            print(now, file=sys.stderr)
            said = now
        time.sleep(1.0)
    print(f"not graded within {seconds:g} s; the feedback will be at {url}/submissions/{sub_id}", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
