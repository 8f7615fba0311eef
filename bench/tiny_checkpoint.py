"""A tiny random model with the default model's tokenizer and vocabulary.

For benchmarks of what surrounds the model (the gateway, the transport, the step's own overhead):
its forward costs a few milliseconds, so what is measured around it is not buried under the noise
of a 2-core machine running a 135M-parameter forward. Its outputs are meaningless text.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def write_tiny_checkpoint(directory: Path, seed: int = 0) -> Path:
    """Write the checkpoint into ``directory`` (created) and return it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tandem_core.model_loader import default_gguf_path, ensure_converted

    source = ensure_converted(default_gguf_path())
    config = AutoConfig.from_pretrained(str(source), local_files_only=True)
    shrink = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    for name, value in (shrink | dict(num_key_value_heads=2, head_dim=16)).items():
        setattr(config, name, value)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(str(directory))
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, directory / name)
    return directory
