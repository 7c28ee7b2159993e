"""Operations around the service: Grafana dashboards, alarm reports, Prometheus metrics, the
demo, the bundled datasets, the benchmarks and the demo Kafka producer (docs/architecture.md)."""
