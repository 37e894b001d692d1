"""gRPC over plain-text HTTP/2 without grpcio: the shared framing (``framing``) and the range-scan
reader (``stream``). Why these exist beside grpcio, and what they cost, is in docs/benchmarks.md."""
