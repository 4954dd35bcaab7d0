"""The SQL store over SQLite and PostgreSQL (SQLAlchemy Core, Alembic)."""
