# The monitor image: the `monitor` CLI (worker, API, migrations, stream registration) and the
# demo replay producer (`python -m monitor.ops.kafka_producer`). Used by docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so that a code change does not reinstall them: install the project's
# declared dependencies (the core and the server, postgres and kafka extras) from pyproject.toml
# with an empty package (and the version file pyproject.toml reads), then the real sources.
COPY pyproject.toml README.md LICENSE ./
COPY monitor/_version.py ./monitor/_version.py
RUN mkdir -p connectors \
    && touch monitor/__init__.py connectors/__init__.py \
    && pip install '.[server,postgres,kafka]' \
    && pip uninstall --yes conformal-monitor \
    && rm -rf monitor connectors build *.egg-info

COPY alembic.ini ./
COPY alembic ./alembic
COPY connectors ./connectors
COPY monitor ./monitor
COPY dashboards ./dashboards
# Editable install: `monitor db upgrade` finds alembic.ini and the migrations beside the package
# (monitor/db/migrate.py), and `monitor dashboards push` finds dashboards/, both under /app.
RUN pip install --no-deps -e '.[server,postgres,kafka]'

# Unprivileged user; /data holds the demo files (a named volume takes this owner on first use).
RUN useradd --create-home --uid 10001 monitor \
    && mkdir -p /data \
    && chown monitor /data
USER monitor

EXPOSE 8000
CMD ["monitor", "--help"]
