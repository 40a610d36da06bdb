"""The service's database: tables, engine, migrations.

SQLite (a file in the service folder) by default; PostgreSQL with `--db postgresql+psycopg://...`.
The schema is created and upgraded by Alembic (`migrations/`), never by `create_all`, so a later
version of the course upgrades an existing database in place.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import (DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint,
                        create_engine, event)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class Base(DeclarativeBase):
    pass


def now() -> datetime:
    return datetime.now(timezone.utc)


class Student(Base):
    """One student of the roster; `token_hash` is the sha256 of their personal token (None: not issued)."""

    __tablename__ = "students"
    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # the LMS id
    name: Mapped[str] = mapped_column(String(400), default="")
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Setting(Base):
    """Service-wide values, e.g. the instructor token's hash."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Session(Base):
    """A signed-in browser: the cookie's sha256, who, and the form token (CSRF)."""

    __tablename__ = "sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    student_id: Mapped[str | None] = mapped_column(ForeignKey("students.id"), nullable=True)  # None: instructor
    csrf: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Submission(Base):
    """One attempt: the notebook's bytes, when it came, and where it is in the queue.

    status: queued -> grading (claimed by `worker` until `lease_until`) -> done. `round` counts
    gradings asked for ("regrade all" adds one); a result is stored once per (submission, round).
    """

    __tablename__ = "submissions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    student_id: Mapped[str] = mapped_column(ForeignKey("students.id"), index=True)
    chapter: Mapped[str] = mapped_column(String(100))
    filename: Mapped[str] = mapped_column(String(400))
    notebook: Mapped[bytes] = mapped_column(LargeBinary)
    sha256: Mapped[str] = mapped_column(String(64))
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    status: Mapped[str] = mapped_column(String(20), default="queued", index=True)
    round: Mapped[int] = mapped_column(Integer, default=1)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    worker: Mapped[str] = mapped_column(String(200), default="")
    tries: Mapped[int] = mapped_column(Integer, default=0)


class Result(Base):
    """A submission's graded result (results.json, late penalty applied), once per round."""

    __tablename__ = "results"
    __table_args__ = (UniqueConstraint("submission_id", "round", name="one_result_per_round"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    round: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    score: Mapped[float] = mapped_column(Float)
    max_score: Mapped[float] = mapped_column(Float)
    result: Mapped[str] = mapped_column(Text)  # the results.json object, as JSON
    graded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    worker: Mapped[str] = mapped_column(String(200), default="")


def aware(t: datetime | None) -> datetime | None:
    """A time read back from the database, as aware UTC (SQLite returns naive ones)."""
    return None if t is None else t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t


def default_url(folder: Path) -> str:
    return f"sqlite:///{Path(folder).resolve() / 'service.sqlite'}"


def make_engine(url: str) -> Engine:
    """An engine; SQLite gets WAL (readers do not block the writer) and a 30 s busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=10,
                               max_overflow=20)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")  # a commit survives a power cut, not only a kill
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def migrate(engine: Engine) -> None:
    """Create or upgrade the schema to the newest migration."""
    from alembic import command
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_db(url: str) -> sessionmaker:
    """A session factory on an up-to-date database."""
    engine = make_engine(url)
    migrate(engine)
    return sessionmaker(engine, expire_on_commit=False)
