"""One stream: its events, configuration and calibration, the label join, the records it
produces, feature attribution, performance windows, the state codec, the detector factory and
the stream monitor (docs/architecture.md)."""
