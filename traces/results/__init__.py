"""Results: rows, the summary and per-job totals, comparisons, CSV and SFT exports."""
