"""``monitor run`` for workers sharing a consumer group on the mock broker.

Exactly what ``monitor run`` does (``monitor.cli.runs.run_source``: SIGTERM finishes the batch and
stops), plus the consumer options that only code can carry: the mock broker's SyncGroup race
needs :class:`connectors.mock_kafka.PatientRangeAssignor` (see that module) with kafka-python; a
``?client=confluent`` source gets :data:`connectors.mock_kafka.MOCK_RDKAFKA_CONFIG`. A real
broker needs none of this: use ``monitor run``.

    python -m tests.integration.worker_main --db URL --source kafka://... --group G \\
        --config STREAM.yaml [--config ...] [--batch-size N] [--checkpoint-every K]
"""

from __future__ import annotations

import argparse
import logging
import sys

from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, MOCK_RDKAFKA_CONFIG
from connectors.url import kafka_url_parts
from monitor.cli.runs import run_source
from monitor.settings import Settings


def main() -> int:
    parser = argparse.ArgumentParser(prog="worker_main")
    parser.add_argument("--db", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--checkpoint-every", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Migrations are run once by the test, as an operator runs `monitor db upgrade` once before
    # starting several workers.
    settings = Settings(database_url=args.db, auto_migrate=False)
    client = kafka_url_parts(args.source)[2].get("client", settings.kafka_client)
    options = MOCK_RDKAFKA_CONFIG if client == "confluent" else MOCK_CONSUMER_OPTIONS
    summary = run_source(args.source, args.config, args.group, settings,
                         batch_size=args.batch_size, source_options=options,
                         checkpoint_every=args.checkpoint_every)
    summary.print_human(sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
