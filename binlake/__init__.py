"""binlake: the CLI (``binlake``), typed config loading for the drain, the local cluster harness and the demo.

Nothing imports this package: it composes the stages (docs/architecture.md).
"""
