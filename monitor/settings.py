"""Service settings, read from the environment (prefix ``MONITOR_``) by entry points only.

Library code never reads the environment: the CLI, the app factory and the worker build one
``Settings`` and pass what they need down.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of the monitoring service.

    Examples
    --------
    >>> Settings(database_url="sqlite:///./x.db").database_url
    'sqlite:///./x.db'
    """

    model_config = SettingsConfigDict(env_prefix="MONITOR_")

    #: SQLAlchemy URL of the database; SQLite is the embedded default.
    database_url: str = "sqlite:///./monitor.db"
    #: ``"read:TOKEN_A,write:TOKEN_B"`` (write implies read).
    api_tokens: str = ""
