"""pytest collection of the checkout: the Alembic scripts are not modules to import for doctests
(``env.py`` runs only inside Alembic)."""

collect_ignore = ["monitor/db/migrations"]
