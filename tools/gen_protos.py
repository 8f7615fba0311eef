"""Regenerate the Python code for every .proto under protos/ (run from anywhere).

python tools/gen_protos.py          # write generated files
python tools/gen_protos.py --check  # exit 1 if the committed files are stale
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
# lines that record the generator's own version, not the protocol: a patch release of grpcio-tools
# (1.85.1 -> 1.85.4) changes them and nothing else, and the committed files still run on it
_GENERATOR_VERSION = re.compile(r"^(GRPC_GENERATED_VERSION = .*|# Protobuf Python Version: .*)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc

    protos = sorted(p.relative_to(ROOT) for p in (ROOT / "protos").rglob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *map(str, protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(p.relative_to(out_dir) for p in out_dir.rglob("*") if p.name.endswith(SUFFIXES))


def _same(generated: Path, committed: Path) -> bool:
    """Equal apart from the generator's version lines."""
    return _GENERATOR_VERSION.sub("", generated.read_text()) == _GENERATOR_VERSION.sub("", committed.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
        stale = [f for f in files if not (ROOT / f).is_file() or not _same(Path(tmp) / f, ROOT / f)]
        if args.check:
            for f in stale:
                print(f"stale generated file: {f} (run python tools/gen_protos.py)", file=sys.stderr)
            return 1 if stale else 0
        for f in files:
            (ROOT / f).write_bytes((Path(tmp) / f).read_bytes())
            print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
