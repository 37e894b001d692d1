"""Ingest: the shared platform under the pump and the drainer (configuration, TLS, the front door,
HTTP/1.1 and HTTP/2 (``http2``), the registry (``registry``), the PD TSO client, the scan and pull
clients) and the Pump daemon on it (``pump``, with its storage).

The platform never imports ``pump``, and ``ingest`` imports nothing of ours but ``schemas``: a pump
stores bytes and never decodes row payloads (docs/architecture.md, import directions).
"""
