"""Ingest: the Pump daemon, its storage, the registry, the TSO client and the scan/pump clients.

``ingest`` imports only ``schemas``: a Pump stores bytes and never decodes row payloads.
"""
