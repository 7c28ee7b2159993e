"""The run time: the pipeline over a batch of records, the :class:`~monitor.engine.batch.Batch` a
sink stores, and the worker's loop (checkpoints, fencing, retries) behind the
:class:`~monitor.engine.sink.Sink` protocol (docs/architecture.md)."""
