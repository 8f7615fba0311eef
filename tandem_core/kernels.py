"""Matmul kernels for the step path, chosen once per process with ``--kernels``.

On CPU, MKL's small-M sgemm makes a forward over 2-8 new tokens cost up to 2x a 1-token forward,
which is exactly the regime of speculative verification. oneDNN with weights reordered ("prepacked")
once at load time keeps the cost nearly flat in the number of rows, so verification of ``k`` drafts
costs about what a plain decode step costs.

* ``eager``: every ``nn.Linear`` as transformers built it (MKL on CPU, cuBLAS on CUDA).
* ``onednn``: every float32 ``nn.Linear`` on CPU runs on oneDNN prepacked weights, and the Python
  around the matmuls shrinks. Decoder layers of the Llama family become :class:`FastDecoderLayer`
  (q, k and v as one GEMM, gate and up as one GEMM, the pre-norms' weights folded into those GEMMs,
  q and k rotated together, the attention function called directly); a gated MLP elsewhere becomes
  a :class:`GatedMLP`; every other linear a :class:`PackedLinear`, which keeps the original weight
  as its parameter (a tied embedding and the draft's sub-vocabulary read it).
* ``auto``: ``onednn`` where it runs (CPU, float32, oneDNN built in), else ``eager``.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tandem_core.kv_cache import write_kv

log = logging.getLogger(__name__)

KERNELS = ("auto", "eager", "onednn")

# batch-size hint for oneDNN's weight layout: a verification block of a few sequences
_PACK_BATCH_HINT = 8
# fewest rows a prepacked GEMM runs on: oneDNN's kernels for 1-3 rows read cold weights slower than its
# kernels for 4-6 (the 49152 x 576 LM head: 4.2 ms for 1 row, 4.8 for 2, 3.7 for 4; `python -m
# bench.gemm_rows`), so a step of 1-3 tokens pads its rows with zeros and drops them after. A 2-token
# forward of the default model (one draft verified) went from 38.0 / 41.7 / 49.4 ms to 34.2 / 38.1 /
# 45.8 at 128 / 512 / 1536 cached tokens; 1 and 3 tokens moved within +-4% (`docs/bench/qcurve-padding`)
MIN_ROWS = 4


class PackedLinear(nn.Module):
    """``y = x W^T + b`` through oneDNN with ``W`` reordered once into oneDNN's blocked layout."""

    def __init__(self, linear: nn.Linear, min_rows: int = MIN_ROWS):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.min_rows = min_rows  # fewer rows than this are padded with zeros up to it (``MIN_ROWS``)
        self.weight = linear.weight  # [out, in] the original parameter, kept for readers (tied heads)
        self.bias = linear.bias  # [out] or None
        self.pack(linear.weight.dtype)

    def pack(self, dtype: torch.dtype) -> None:
        """(Re)pack the weight as ``dtype``: bfloat16 halves the bytes a GEMM of a few rows reads, the
        inputs are cast to it and the outputs back (``forward``); float32 as the weight itself."""
        with torch.no_grad():
            weight = self.weight.detach().to(dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_BATCH_HINT)
        self.register_buffer("packed", packed, persistent=False)  # [out, in] oneDNN layout (opaque)
        self.packed_bias = None if self.bias is None else self.bias.detach().to(dtype)  # [out] or None
        self.packed_dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out], x's dtype
        if x.dtype == self.packed_dtype:
            return self._gemm(x)
        return self._gemm(x.to(self.packed_dtype)).to(x.dtype)

    def _gemm(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out], in the packed dtype
        rows = x.numel() // self.in_features
        if 0 < rows < self.min_rows:  # each output row depends on its input row alone: pads change nothing
            flat = x.reshape(rows, self.in_features)
            padded = torch.cat([flat, flat.new_zeros(self.min_rows - rows, self.in_features)])
            out = torch.ops.mkldnn._linear_pointwise(padded, self.packed, self.packed_bias, "none", [], "")
            return out[:rows].reshape(*x.shape[:-1], self.out_features)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.packed_bias, "none", [], "")

    def extra_repr(self) -> str:
        weights = str(self.packed_dtype).removeprefix("torch.")
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn prepacked {weights}"


def onednn_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """True where prepacked oneDNN linears run: CPU, float32, a torch built with oneDNN."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def resolve_kernels(choice: str, device: torch.device | str, dtype: torch.dtype) -> str:
    """The kernel setting that will actually run for ``choice`` on this device and dtype."""
    if choice not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {choice!r}")
    if choice == "eager":
        return "eager"
    if onednn_available(device, dtype):
        return "onednn"
    if choice == "onednn":
        log.warning("--kernels onednn needs float32 on CPU (have %s on %s); using eager", dtype, device)
    return "eager"


def apply_kernels(module: nn.Module, choice: str) -> str:
    """Swap ``module``'s linears for the chosen kernels in place; return the setting applied."""
    param = next(module.parameters())
    kernels = resolve_kernels(choice, param.device, param.dtype)
    if kernels == "onednn":
        count = _pack_linears(module)
        log.info("kernels: onednn (%d linears prepacked)", count)
    return kernels


WEIGHTS = ("auto", "float32", "bfloat16")


def onednn_bf16() -> bool:
    """Whether this torch's oneDNN runs bfloat16 GEMMs on this CPU at all (natively or by conversion)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether oneDNN runs bfloat16 GEMMs natively on this CPU: AVX512-BF16 or AMX in the CPU's flags (oneDNN
    also runs them on plain AVX-512 by converting them, a path not measured here: such CPUs stay on float32)."""
    if not onednn_bf16():
        return False
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: no way to tell here, stay on float32
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def pack_weights(module: nn.Module, choice: str) -> str:
    """Repack every prepacked GEMM of ``module`` with weights in ``choice`` (``WEIGHTS``; auto: bfloat16
    where the CPU runs it natively, else float32); return the setting applied. Activations stay float32
    between the GEMMs: each casts its input to the weights' dtype and its output back."""
    if choice not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {choice!r}")
    native = native_bf16()
    if choice == "auto":
        choice = "bfloat16" if native else "float32"
    elif choice == "bfloat16" and not native:
        log.warning("bfloat16 GEMM weights need a CPU with native bfloat16 (AVX512-BF16 or AMX); using float32")
        choice = "float32"
    dtype = getattr(torch, choice)
    for m in module.modules():
        if isinstance(m, PackedLinear) and m.packed_dtype != dtype:
            m.pack(dtype)
    return choice


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with gate and up as one prepacked GEMM."""

    def __init__(self, mlp: nn.Module, fold: nn.Module | None = None):
        """``fold``: an RMSNorm whose weight is multiplied into gate and up (the caller applies the scale)."""
        super().__init__()
        self.act_fn = mlp.act_fn
        self.intermediate = mlp.gate_proj.out_features
        gate_up = _concat_linears([mlp.gate_proj, mlp.up_proj])
        self.gate_up = PackedLinear(gate_up if fold is None else _fold_norm(gate_up, fold))
        self.down_proj = PackedLinear(mlp.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., hidden] -> [..., hidden]
        gate, up = self.gate_up(x).split(self.intermediate, dim=-1)  # [..., intermediate] each
        return self.down_proj(self.act_fn(gate) * up)


class FastDecoderLayer(nn.Module):
    """A Llama-family decoder layer (Llama/SmolLM, Qwen2, Qwen3, Mistral) with fused projections.

    Same math as transformers' layer: pre-norm attention with rotary embeddings (per-head q/k norms
    for Qwen3), residual, pre-norm gated MLP, residual; the attention function is the one the model's
    config names (the project's paged attention), called with the layer's attention module.
    """

    _CLASSES = {"LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "MistralDecoderLayer"}

    @classmethod
    def fits(cls, layer: nn.Module) -> bool:
        attn = getattr(layer, "self_attn", None)
        if type(layer).__name__ not in cls._CLASSES or attn is None or getattr(attn, "sliding_window", None):
            return False
        projections = [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
        norms = [getattr(layer, n, None) for n in ("input_layernorm", "post_attention_layernorm")]
        if any(RMSScale.of(n) is None for n in norms):
            return False
        return all(_is_linear(p) for p in projections) and _is_gated_mlp(getattr(layer, "mlp", None))

    def __init__(self, layer: nn.Module):
        super().__init__()
        attn = layer.self_attn
        self.attn = attn  # what the attention function receives (layer_idx, scaling, config)
        self.head_dim = attn.head_dim
        self.widths = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        self.q_norm = _fast_norm(getattr(attn, "q_norm", None))  # Qwen3: RMSNorm over each head
        self.k_norm = _fast_norm(getattr(attn, "k_norm", None))
        # the pre-norms' weights are folded into the GEMM after them: only the RMS scale stays
        self.input_scale = RMSScale.of(layer.input_layernorm)
        self.post_scale = RMSScale.of(layer.post_attention_layernorm)
        qkv = _concat_linears([attn.q_proj, attn.k_proj, attn.v_proj])
        self.qkv = PackedLinear(_fold_norm(qkv, layer.input_layernorm))
        self.o_proj = PackedLinear(attn.o_proj)
        self.mlp = GatedMLP(layer.mlp, fold=layer.post_attention_layernorm)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):  # the packed copies replace them
            delattr(attn, name)

    def forward(
        self,
        hidden_states: torch.Tensor,  # [1, num_tokens, hidden]
        position_embeddings: tuple[torch.Tensor, torch.Tensor],  # cos, sin [1, num_tokens, head_dim]
        **kwargs,
    ) -> torch.Tensor:  # [1, num_tokens, hidden]
        x = hidden_states
        q, k, v = self._rotated_qkv(self.qkv(self.input_scale(x)), position_embeddings)
        attention = ALL_ATTENTION_FUNCTIONS[self.attn.config._attn_implementation]
        kwargs.pop("attention_mask", None)
        out, _ = attention(self.attn, q, k, v, None, scaling=self.attn.scaling, **kwargs)
        x = x + self.o_proj(out.reshape(*x.shape[:-1], -1))
        return x + self.mlp(self.post_scale(x))

    def write_kv(
        self,
        hidden_states: torch.Tensor,  # [1, num_tokens, hidden]
        position_embeddings: tuple[torch.Tensor, torch.Tensor],  # cos, sin [1, num_tokens, head_dim]
        **kwargs,  # tandem_cache, tandem_batch: where the keys and values go
    ) -> None:
        """Only this layer's keys and values of the tokens, into the cache: rows whose output nobody reads
        (an MTP block catching up on past pairs) skip attention, the output projection and the MLP."""
        _, k, v = self._rotated_qkv(self.qkv(self.input_scale(hidden_states)), position_embeddings)
        write_kv(kwargs["tandem_cache"], self.attn.layer_idx, k, v, kwargs["tandem_batch"])

    def _rotated_qkv(
        self,
        qkv: torch.Tensor,  # [1, num_tokens, q + k + v widths]
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # q, k, v [1, heads, num_tokens, head_dim]
        cos, sin = (t.unsqueeze(2) for t in position_embeddings)  # [1, num_tokens, 1, head_dim]
        q_width, k_width, _ = self.widths
        heads = (*qkv.shape[:-1], -1, self.head_dim)
        v = qkv[..., q_width + k_width :].view(heads)
        if self.q_norm is None:  # q and k side by side in the GEMM's output: rotate them in one go
            qk = _rotate(qkv[..., : q_width + k_width].view(heads), cos, sin)
            q, k = qk.split([q_width // self.head_dim, k_width // self.head_dim], dim=2)
        else:
            q, k = qkv[..., :q_width].view(heads), qkv[..., q_width : q_width + k_width].view(heads)
            q, k = _rotate(self.q_norm(q), cos, sin), _rotate(self.k_norm(k), cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half convention: x * cos + [-x2, x1] * sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _fast_norm(norm: nn.Module | None) -> nn.Module | None:
    if norm is None:
        return None
    if type(norm).__name__ in _LLAMA_RMSNORMS and hasattr(norm, "variance_epsilon"):
        return FastRMSNorm(norm)
    return norm


class FastRMSNorm(nn.Module):
    """The Llama-family RMSNorm (float32 statistics, weight after the cast) on ``F.rms_norm``."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.weight = norm.weight  # [hidden]
        self.eps = norm.variance_epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return self.weight * torch.nn.functional.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)
        return torch.nn.functional.rms_norm(x, x.shape[-1:], self.weight, self.eps)


class RMSScale(nn.Module):
    """``x / sqrt(mean(x^2) + eps)``: a Llama-family RMSNorm without its weight (folded into the next GEMM).

    Four small ops (a vector norm, then the scale) instead of ``F.rms_norm``'s decomposition: on CPU
    each op's dispatch costs microseconds once the GEMMs have flushed the caches, and a step runs 60.
    """

    def __init__(self, eps: float, width: int):
        super().__init__()
        self.inv_width = 1.0 / width
        self.register_buffer("eps", torch.tensor(eps), persistent=False)  # [] float32

    @classmethod
    def of(cls, norm: nn.Module | None) -> RMSScale | None:
        """The scale of ``norm`` if it is a float32 Llama-family RMSNorm, else None."""
        if type(norm).__name__ not in _LLAMA_RMSNORMS or not hasattr(norm, "variance_epsilon"):
            return None
        if norm.weight.dtype != torch.float32:
            return None
        return cls(norm.variance_epsilon, norm.weight.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., width] -> [..., width]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # [..., 1]
        return x * torch.rsqrt(torch.addcmul(self.eps, norm, norm, value=self.inv_width))


def _fold_norm(linear: nn.Linear, norm: nn.Module) -> nn.Linear:
    """``linear`` (a fresh copy) with ``norm``'s weight multiplied into its input columns."""
    with torch.no_grad():
        linear.weight.mul_(norm.weight.detach()[None, :])  # W (w * x) = (W diag(w)) x
    return linear


# RMSNorm classes whose forward is exactly FastRMSNorm's (Gemma's 1 + weight is not)
_LLAMA_RMSNORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm", "Qwen3MoeRMSNorm"}


def _concat_linears(linears: list[nn.Linear]) -> nn.Linear:
    """One nn.Linear whose output is the members' outputs side by side."""
    weight = torch.cat([lin.weight.detach() for lin in linears])  # [sum out, in]
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=linears[0].bias is not None)
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if fused.bias is not None:
        fused.bias = nn.Parameter(torch.cat([lin.bias.detach() for lin in linears]), requires_grad=False)
    return fused


def _is_linear(m: object) -> bool:
    return type(m) is nn.Linear and m.weight.dtype == torch.float32


def _is_gated_mlp(m: nn.Module) -> bool:
    parts = [getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    return hasattr(m, "act_fn") and all(_is_linear(p) for p in parts)


def _pack_linears(module: nn.Module) -> int:
    """Rewrite ``module``'s children in place; return how many GEMMs a forward now runs on oneDNN."""
    count = 0
    for name, child in list(module.named_children()):
        if FastDecoderLayer.fits(child):
            setattr(module, name, FastDecoderLayer(child))
            count += 4
        elif _is_gated_mlp(child):
            setattr(module, name, GatedMLP(child))
            count += 2
        elif _is_linear(child):
            setattr(module, name, PackedLinear(child))
            count += 1
        elif _fast_norm(child) is not child and child is not None:
            setattr(module, name, _fast_norm(child))
        else:
            count += _pack_linears(child)
    return count
