"""The Parquet sink: CDC files per table and day, a manifest per table, the run checkpoint in a JSON file."""
