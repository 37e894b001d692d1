"""The import directions of docs/architecture.md hold over the source tree.

The rules are read from the document's ``import-rules`` table, so the page and this test cannot
drift apart: every module of every package in the table is parsed, and each import of one of our
packages must be the module's own package or one its row allows (the most specific row wins).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
OURS = ("schemas", "ingest", "transform", "sink", "upstream", "binlake")
# where each package's folder is: the emulator's package lives in emulator/, a distribution of its own
HOME = {pkg: ROOT / "emulator" / pkg if pkg == "upstream" else ROOT / pkg for pkg in OURS}


def rules() -> dict[str, set[str]]:
    """package → the packages it may import, from the document's table."""
    text = DOC.read_text()
    block = re.search(r"<!-- import-rules: begin -->(.*?)<!-- import-rules: end -->", text, re.S)
    assert block, "docs/architecture.md has no import-rules table"
    out: dict[str, set[str]] = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        out[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    return out


def owner(module: str, table: dict[str, set[str]]) -> str | None:
    """The most specific package of the table that ``module`` belongs to."""
    best = None
    for pkg in table:
        if (module == pkg or module.startswith(pkg + ".")) and (best is None or len(pkg) > len(best)):
            best = pkg
    return best


def module_name(path: Path, top: str) -> str:
    rel = path.relative_to(HOME[top].parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file (relative imports are not used here)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # ``from transform import codec`` imports the subpackage
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names
                       if node.module.split(".")[0] in HOME
                       and (HOME[node.module.split(".")[0]].parent / Path(*node.module.split("."), a.name)).is_dir())
    return out


def violations(table: dict[str, set[str]]) -> list[str]:
    found = []
    for top in OURS:
        for path in sorted(HOME[top].rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            mod = module_name(path, top)
            me = owner(mod, table)
            assert me is not None, f"{mod} belongs to no row of the import-rules table"
            for line, target in imported(path):
                if target.split(".")[0] not in OURS:
                    continue
                theirs = owner(target, table)
                if theirs == me or theirs in table[me]:
                    continue
                found.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {target} ({theirs})")
    return found


def test_the_tree_keeps_the_documented_import_directions() -> None:
    table = rules()
    assert set(OURS) <= set(table), f"the table must cover every package: {sorted(set(OURS) - set(table))}"
    assert violations(table) == []


def test_a_forbidden_import_is_found() -> None:
    """The check can fail: were ``ingest`` allowed nothing, its imports of ``schemas`` are named; were
    ``binlake`` not allowed the pump, the command that starts one is."""
    table = rules()
    table["ingest"] = set()
    found = violations(table)
    assert any(v.startswith("ingest/") and "imports schemas" in v for v in found), found[:3]
    table = rules()
    table["binlake"].discard("ingest.pump")   # the pump is a package of its own: its one user is named
    found = violations(table)
    assert any(v.startswith("binlake/cli.py") and "imports ingest.pump" in v for v in found), found[:3]


def test_a_pump_process_loads_no_drainer_stage() -> None:
    """The pump command (its CLI path and the daemon's modules) imports neither the Drainer's stages,
    the codec, the sinks nor pyarrow/pyspark: they would double a pump's memory for nothing."""
    code = ("import sys\nfrom binlake import cli\nimport ingest.pump.pump\n"
            "rc = cli.main(['pump', '--config', '/nonexistent/pump.toml'])\n"
            "heavy = ('transform', 'sink', 'upstream', 'pyarrow', 'pyspark', 'pyiceberg')\n"
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "1 []", out.stdout + out.stderr


def http2_internals(path: Path) -> list[str]:
    """The imports in ``path`` of an ``ingest.http2`` submodule (``ingest.http2.framing``, or
    ``from ingest.http2 import framing``) rather than the package's public names."""
    submodules = {p.stem for p in (ROOT / "ingest" / "http2").glob("*.py")} - {"__init__"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "ingest.http2"]
        found += [f"{path.name}:{node.lineno}: imports {n}" for n in names
                  if n.startswith("ingest.http2.") and n.split(".")[2] in submodules]
    return found


def test_only_ingest_http2_imports_its_submodules(tmp_path: Path) -> None:
    """Outside ``ingest/http2/`` (and ``tests/``), code imports ``ingest.http2``'s public API, never a
    submodule; the check names an import that does."""
    skip = (ROOT / "ingest" / "http2", ROOT / "tests")
    found = [v for top in sorted(ROOT.iterdir())
             if top.is_dir() and not top.name.startswith(".") and not top.name.endswith(".egg-info")
             for path in sorted(top.rglob("*.py")) if not any(path.is_relative_to(s) for s in skip)
             for v in http2_internals(path)]
    assert found == []
    bad = tmp_path / "bad.py"
    bad.write_text("import ingest.http2.server\nfrom ingest.http2.framing import frame\n"
                   "from ingest.http2 import stream, stream_call\nfrom ingest.http2 import WireRpcError\n")
    assert http2_internals(bad) == ["bad.py:1: imports ingest.http2.server", "bad.py:2: imports ingest.http2.framing",
                                    "bad.py:3: imports ingest.http2.stream"]
