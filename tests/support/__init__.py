"""Helpers shared by the tests: example streams and reference runs, worker processes, the Kafka
fixtures, the example of the revision tests, a private PostgreSQL cluster. No test module is
imported as a library."""
