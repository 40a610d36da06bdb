"""Alembic's environment: the service passes its connection in `config.attributes` (`store.migrate`)."""
from alembic import context
from sqlalchemy import create_engine

from autograder.service.store import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # `alembic -x url=...` from the command line
    connection = create_engine(context.get_x_argument(as_dictionary=True)["url"]).connect()
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
