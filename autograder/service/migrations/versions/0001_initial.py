"""The first schema: students, settings, sessions, submissions, results.

Revision ID: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("students",
                    sa.Column("id", sa.String(200), primary_key=True),
                    sa.Column("name", sa.String(400), nullable=False),
                    sa.Column("token_hash", sa.String(64), nullable=True, unique=True),
                    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False))
    op.create_table("settings",
                    sa.Column("key", sa.String(100), primary_key=True),
                    sa.Column("value", sa.Text, nullable=False))
    op.create_table("sessions",
                    sa.Column("id_hash", sa.String(64), primary_key=True),
                    sa.Column("student_id", sa.String(200), sa.ForeignKey("students.id"), nullable=True),
                    sa.Column("csrf", sa.String(64), nullable=False),
                    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False))
    op.create_table("submissions",
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("student_id", sa.String(200), sa.ForeignKey("students.id"), nullable=False),
                    sa.Column("chapter", sa.String(100), nullable=False),
                    sa.Column("filename", sa.String(400), nullable=False),
                    sa.Column("notebook", sa.LargeBinary, nullable=False),
                    sa.Column("sha256", sa.String(64), nullable=False),
                    sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
                    sa.Column("status", sa.String(20), nullable=False),
                    sa.Column("round", sa.Integer, nullable=False),
                    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
                    sa.Column("worker", sa.String(200), nullable=False),
                    sa.Column("tries", sa.Integer, nullable=False))
    op.create_index("ix_submissions_student_id", "submissions", ["student_id"])
    op.create_index("ix_submissions_submitted_at", "submissions", ["submitted_at"])
    op.create_index("ix_submissions_status", "submissions", ["status"])
    op.create_table("results",
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("submission_id", sa.Integer, sa.ForeignKey("submissions.id"), nullable=False),
                    sa.Column("round", sa.Integer, nullable=False),
                    sa.Column("status", sa.String(20), nullable=False),
                    sa.Column("score", sa.Float, nullable=False),
                    sa.Column("max_score", sa.Float, nullable=False),
                    sa.Column("result", sa.Text, nullable=False),
                    sa.Column("graded_at", sa.DateTime(timezone=True), nullable=False),
                    sa.Column("worker", sa.String(200), nullable=False),
                    sa.UniqueConstraint("submission_id", "round", name="one_result_per_round"))
    op.create_index("ix_results_submission_id", "results", ["submission_id"])


def downgrade() -> None:
    for table in ("results", "submissions", "sessions", "settings", "students"):
        op.drop_table(table)
