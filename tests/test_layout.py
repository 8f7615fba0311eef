"""The package layout holds: the two services stand on tandem_core and protos only, never on each other."""

import ast
from pathlib import Path

from bench.procs import ROOT

# package -> top-level packages it must not import
FORBIDDEN = {
    "target_service": {"draft_service", "bench", "training", "tests", "gateway", "client"},
    "draft_service": {"target_service", "bench", "training", "tests", "gateway", "client"},
    "tandem_core": {"target_service", "draft_service", "bench", "training", "tests", "gateway", "client"},
    "client": {"target_service", "draft_service", "bench", "training", "tests", "gateway", "tandem_core"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level package names a file imports (absolute imports, anywhere in the file)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def violations() -> list[str]:
    found = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in sorted(imported_packages(path) & banned):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_no_imports_across_the_service_boundary():
    assert violations() == []


def imported_modules(path: Path) -> set[str]:
    """Dotted names a file imports, with ``from a import b`` counted as ``a.b``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def test_only_the_draft_link_wire_module_touches_the_draft_protobuf():
    wire = ROOT / "tandem_core" / "draft_link" / "wire.py"
    users = [
        str(path.relative_to(ROOT))
        for package in ("target_service", "draft_service", "tandem_core")
        for path in sorted((ROOT / package).rglob("*.py"))
        if "protos.mtp.v1.draft_service_pb2" in imported_modules(path)
    ]
    assert users == [str(wire.relative_to(ROOT))]


def test_the_check_sees_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom draft_service.mtp_module import MTPHeads\n\ndef f():\n    import bench.procs\n")
    assert imported_packages(bad) == {"os", "draft_service", "bench"}
