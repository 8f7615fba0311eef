"""Generated protobuf code is fresh; configuration reads flags and environment; model loading errors are clear."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bench.procs import ROOT
from tandem_core.model_loader import ModelNotFoundError, load_model
from target_service.config import TargetConfig, parse_config


def test_generated_code_matches_the_protos():
    out = subprocess.run([sys.executable, "tools/gen_protos.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_freshness_ignores_only_the_generators_version_lines(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from gen_protos import _same
    finally:
        sys.path.remove(str(ROOT / "tools"))
    committed = (ROOT / "protos/mtp/v1/draft_service_pb2_grpc.py").read_text()
    assert "GRPC_GENERATED_VERSION = " in committed
    other_version = tmp_path / "a.py"
    other_version.write_text(re.sub(r"GRPC_GENERATED_VERSION = '[^']*'", "GRPC_GENERATED_VERSION = '9.9.9'", committed))
    other_code = tmp_path / "b.py"
    other_code.write_text(committed.replace("class DraftServiceStub", "class DraftServiceStubRenamed"))
    assert _same(other_version, ROOT / "protos/mtp/v1/draft_service_pb2_grpc.py")
    assert not _same(other_code, ROOT / "protos/mtp/v1/draft_service_pb2_grpc.py")


@pytest.mark.parametrize("proto", ["target_service.proto", "draft_service.proto"])
def test_every_rpc_and_field_is_commented(proto):
    text = (ROOT / "protos/mtp/v1" / proto).read_text().splitlines()
    for i, line in enumerate(text):
        stripped = line.strip()
        is_field = stripped.endswith(";") and "=" in stripped and not stripped.startswith(("syntax", "option"))
        if stripped.startswith("rpc ") or is_field:
            assert text[i - 1].strip().startswith("//"), f"line {i + 1} has no comment: {stripped}"


def test_config_flags_beat_environment_beat_defaults():
    assert parse_config([], env={}) == TargetConfig()
    assert TargetConfig().host == "127.0.0.1"
    cfg = parse_config(["--max-slots", "3"], env={"TANDEM_MAX_SLOTS": "5", "TANDEM_PORT": "6000"})
    assert (cfg.max_slots, cfg.port) == (3, 6000)
    with pytest.raises(SystemExit):
        parse_config(["--num-draft-tokens", "7"], env={})
    with pytest.raises(SystemExit):
        parse_config(["--draft-transport", "tcp"], env={})
    assert parse_config(["--draft-transport", "inline"], env={}).draft_transport == "inline"
    with pytest.raises(SystemExit):
        parse_config(["--draft-choice", "some"], env={})
    assert parse_config([], env={"TANDEM_DRAFT_CHOICE": "each"}).draft_choice == "each"


def test_missing_models_name_what_to_do(tmp_path):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="not found"):
        load_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="dtype"):
        load_model("default", dtype="int3")


def test_hf_directory_loads_with_bfloat16(tmp_path, default_model_converted):
    loaded = load_model(str(default_model_converted), dtype="bfloat16")
    assert next(loaded.model.parameters()).dtype.is_floating_point
    assert str(next(loaded.model.parameters()).dtype) == "torch.bfloat16"
    assert loaded.tokenizer.chat_template
