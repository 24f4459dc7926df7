"""A job's samples as OpenTelemetry traces (docs/observability.md): trace context sent to task
apps and read from their LLM calls (`context`), a sample's spans built from its recorded rows
(`spans`), and their export over OTLP/HTTP from a worker (`export`)."""
