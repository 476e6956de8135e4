"""Alembic environment for the result store.

commlens runs migrations itself (``commlens.store.schema``), on a connection it has
already opened inside a transaction and locked; that connection arrives in
``config.attributes["connection"]``. There is no alembic.ini and no offline mode.
"""

from __future__ import annotations

from alembic import context

from commlens.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run result store migrations with `commlens db upgrade`, not the alembic command")

# render_as_batch: SQLite cannot ALTER most things, so a changed table is copied (Alembic's batch mode).
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
