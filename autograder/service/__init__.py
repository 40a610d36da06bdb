"""The submission service: `python -m autograder serve`.

Students hand in a notebook on a web page (or with `python -m attnkit submit`) and read their
feedback seconds later; instructors see the class on a dashboard. The service puts the existing
grader behind a web page; it grades nothing itself:

- storage (`store`): SQLite in the service folder by default, PostgreSQL by URL; migrations by Alembic.
  A submission is committed before its upload is acknowledged.
- the queue (`queue`): submissions are claimed with a lease that grading renews; a result is written
  once per submission and grading round (a unique constraint), so after a crash or `kill -9` every
  accepted submission gets exactly one result.
- grading (`grading`): the batch engine's warm workers (`autograder.batch.worker`, each with its sandbox),
  or Dask workers (`--scheduler`); the late policy of `autograder.late` with the deadline of
  `autograder.batch.deadlines`.
- the web (`app`, `pages`): FastAPI; tokens (`tokens`) issued from the roster, stored hashed.
- the class (`classes`): the stored results written as a batch's results folder, so the class table,
  report, similarity report and exports are the batch's own.
"""
