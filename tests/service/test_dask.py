"""`serve --scheduler ADDRESS`: the service grades on Dask workers (a scheduler and two workers on
127.0.0.1, tests/test_cluster.py's), with the same feedback as the local workers give."""
from __future__ import annotations

from autograder.service import tokens
from autograder.service.store import open_db
from tests.batch.toy import CHAPTER, make_notebook
from tests.service.live import Live, submit, wait_done
from tests.test_cluster import dask_cluster, on_cluster  # noqa: F401 - fixtures


def test_the_service_grades_on_a_dask_cluster(on_cluster, tmp_path):  # noqa: F811
    folder = tmp_path / "svc"
    folder.mkdir()
    url = f"sqlite:///{folder / 'service.sqlite'}"
    issued = {sid: tok for sid, _, tok in tokens.issue(open_db(url), [("alice", ""), ("bob", "")])}
    live = Live(folder, url, [CHAPTER], "--scheduler", on_cluster).start()
    try:
        ids = {who: submit(live.url, issued[who], make_notebook(tmp_path / who / f"{CHAPTER}.ipynb", variant),
                           CHAPTER).json()["id"] for who, variant in (("alice", "wrong"), ("bob", "ok"))}
        wrong = wait_done(live.url, issued["alice"], ids["alice"])
        right = wait_done(live.url, issued["bob"], ids["bob"])
    finally:
        live.stop()
    assert wrong["score"] == "1 / 4" and "known mistake: a - b" in wrong["feedback"]
    assert right["score"] == "4 / 4"
