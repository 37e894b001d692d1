"""What ships: binlake's wheel holds the product only; the TiDB emulator and the demo harness
(``upstream``, with its own command ``binlake-emulator``) are the ``binlake-emulator`` distribution of
``emulator/``; binlake's command knows nothing of them."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = {"binlake", "ingest", "transform", "sink", "schemas"}
# what is not source: environments, caches, build output, data directories of the demo and examples
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv*", ".peers", "build", "dist", "*.egg-info", "__pycache__",
                                     ".*_cache", ".hypothesis", "demo", "data.*", "warehouse", "cdc", "registry.json*")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both distributions built by pip from a copy of the checkout (its build directories stay clean
    of ours), with the environment's setuptools."""
    tmp = tmp_path_factory.mktemp("wheels")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    out = tmp / "out"
    for project in (src, src / "emulator"):
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(out), str(project)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    return {w.name.split("-")[0]: w for w in out.glob("*.whl")}


def _modules(wheel: Path) -> set[str]:
    """The dotted names of the wheel's Python modules."""
    return {n[:-3].replace("/", ".").removesuffix(".__init__") for n in zipfile.ZipFile(wheel).namelist()
            if n.endswith(".py")}


def test_the_product_wheel_has_no_emulator_and_no_demo_harness(wheels: dict[str, Path]) -> None:
    modules = _modules(wheels["binlake"])
    assert {m.split(".")[0] for m in modules} == PRODUCT
    assert "binlake.cli" in modules and "binlake.process" in modules
    assert not [m for m in modules if m.split(".")[0] == "upstream" or m.endswith((".demo", ".local"))]


def test_the_emulator_wheel_is_upstream_with_the_demo_harness(wheels: dict[str, Path]) -> None:
    modules = _modules(wheels["binlake_emulator"])
    assert {m.split(".")[0] for m in modules} == {"upstream"}
    assert {"upstream.cluster", "upstream.pump_client", "upstream.local", "upstream.demo"} <= modules
    shipped = {p.relative_to(ROOT / "emulator").with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
               for p in (ROOT / "emulator").rglob("*.py")}
    assert modules == shipped


def test_the_emulator_requires_the_binlake_of_its_checkout() -> None:
    product = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    emulator = tomllib.loads((ROOT / "emulator" / "pyproject.toml").read_text())["project"]
    assert f"binlake=={product['version']}" in emulator["dependencies"]
    assert emulator["version"] == product["version"]
    # what only the emulator imports is its dependency, not the product's
    names = {d.split("==")[0].split("[")[0] for d in product["dependencies"]}
    assert not names & {"sqlglot", "mysql-mimic"}


def test_each_distribution_has_its_own_command(wheels: dict[str, Path]) -> None:
    def scripts(wheel: Path) -> str:
        with zipfile.ZipFile(wheel) as z:
            return next(z.read(n).decode() for n in z.namelist() if n.endswith("entry_points.txt"))

    assert scripts(wheels["binlake"]).split() == ["[console_scripts]", "binlake", "=", "binlake.cli:console"]
    assert scripts(wheels["binlake_emulator"]).split() == ["[console_scripts]", "binlake-emulator", "=",
                                                           "upstream.cli:main"]


def test_the_product_command_has_no_emulator_command() -> None:
    """``binlake upstream`` and ``binlake demo`` are gone: argparse refuses them as any unknown command."""
    from binlake.cli import build_parser
    from binlake.process import COMMANDS

    parser = build_parser()
    [commands] = [a.choices for a in parser._subparsers._group_actions] if parser._subparsers else [{}]
    assert set(commands) == set(COMMANDS)
    for command in ("upstream", "demo"):
        with pytest.raises(SystemExit):
            build_parser(command).parse_args([command])
