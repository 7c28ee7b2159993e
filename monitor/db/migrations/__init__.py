"""Alembic migration scripts of the service database, shipped inside the package.

``monitor db upgrade`` finds them with :mod:`importlib.resources`; ``alembic`` run from a checkout
finds them through ``alembic.ini`` (``script_location``).
"""
