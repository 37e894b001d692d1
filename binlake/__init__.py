"""binlake: the ``binlake`` command (``cli``), the commands it runs (drain, verify, check, maintain,
restore, reparo), the drainer's typed config and the process-wide settings of its processes.

Nothing of the product imports this package: it composes the stages (docs/architecture.md).
"""
