"""The run time: the pipeline over a batch of records, the worker's loop with checkpoints and
fencing behind the :class:`~monitor.engine.sink.Sink` protocol, dead-letter replay, the fleet
runner and health (docs/architecture.md)."""
