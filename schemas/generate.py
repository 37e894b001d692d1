"""Generate the protobuf/gRPC Python modules for every ``.proto`` file in this folder."""
from __future__ import annotations

import sys
from pathlib import Path

PROTOS = ("binlog.proto", "pump.proto", "cistern.proto", "pdpb.proto", "binlake.proto", "secondary_binlog.proto",
          "pb_binlog.proto")


def generate(out_dir: Path) -> None:
    """Run protoc (grpc_tools) on every proto into ``out_dir``/schemas; raise on failure."""
    # imported lazily: grpcio-tools is a dev dependency
    from grpc_tools import protoc

    root = Path(__file__).resolve().parent.parent
    (out_dir / "schemas").mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{root}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}"]
    args += [f"schemas/{p}" for p in PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
