"""GGUF tensor names -> transformers parameter names, per architecture.

Names come from gguf-py's published name table (`gguf.get_tensor_name_map`), which lists the
transformers names llama.cpp's converter accepts for each GGUF name; we invert it for the
model at hand. What the converter did to the values on the way in is undone by byte-safe
operations (`conversions.py`), so quantized weights keep their blocks.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

from ..gguf_io.reader import GgufFile
from .conversions import GptOssExpertsLayout, NormPlusOne, Reshape, RopeUnpermuteRows

__all__ = [
    "ArchRules", "ARCH_RULES", "TensorPlan", "gguf_names", "gpt_oss_part", "plan_tensors", "is_supported",
    "weight_transforms", "experts_to_llamacpp", "experts_from_mxfp4",
]


@dataclass(frozen=True)
class ArchRules:
    """What llama.cpp's converter did to an architecture's tensors beyond renaming them."""

    # q/k rows reordered from HF's half-split rotary layout to ggml's interleaved one
    rope_permuted: bool = False
    # RMSNorm weights stored as `1 + w` (the HF Gemma norms multiply by `1 + w`)
    norm_plus_one: bool = False
    # transformers' experts are gpt-oss's `GptOssExperts` (`x @ W`: gate_up [E, H, 2I] with gate and
    # up interleaved, down [E, I, H]); llama.cpp split and transposed them to [E, I, H] / [E, H, I]
    experts_interleaved: bool = False


ARCH_RULES: dict[str, ArchRules] = {
    "llama": ArchRules(rope_permuted=True),
    "qwen2": ArchRules(),
    "qwen3": ArchRules(),
    "qwen2moe": ArchRules(),
    "qwen3moe": ArchRules(),
    "phi3": ArchRules(),
    "starcoder2": ArchRules(),
    "gemma2": ArchRules(norm_plus_one=True),
    "gemma3": ArchRules(norm_plus_one=True),
    "gpt-oss": ArchRules(experts_interleaved=True),
}

_ARCH_BY_NAME = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}


def is_supported(gguf_arch: str) -> bool:
    return gguf_arch in ARCH_RULES


@dataclass
class TensorPlan:
    """How each GGUF tensor reaches the model."""

    hf_names: dict[str, str]  # gguf name -> model parameter name (or a merge source, below)
    merges: dict[str, list[str]]  # model parameter -> the sources concatenated row-wise into it
    rope_rows: dict[str, RopeUnpermuteRows]  # model name -> the row permutation it needs
    plus_one: set[str]  # model names of norms stored as 1 + w
    reshape: dict[str, tuple[int, ...]]  # float tensors stored flatter than the parameter
    unmatched: list[str]  # gguf names no model parameter claims
    # model names whose every source is quantized in the file (kept packed unless unpacked)
    quantized: set[str] = field(default_factory=set)
    # gpt-oss expert parameters -> their `GptOssExpertsLayout` part, applied only when the experts
    # module is not packed (GgufExperts keeps llama.cpp's layout)
    experts_layout: dict[str, str] = field(default_factory=dict)

    def conversion(self, hf_name: str):
        """The conversion op a parameter needs, or None when renaming is all."""
        if hf_name in self.rope_rows:
            return self.rope_rows[hf_name]
        if hf_name in self.plus_one:
            return NormPlusOne()
        if hf_name in self.reshape:
            return Reshape(self.reshape[hf_name])
        return None

    def sources(self, hf_name: str) -> list[str]:
        return self.merges.get(hf_name, [hf_name])

    def experts_packed(self, hf_name: str, unpack) -> bool:
        """Whether the experts module owning `hf_name` becomes a GgufExperts: both its weights are
        quantized in the file and neither is unpacked (what `packing.swap_modules` requires)."""
        module = hf_name.rpartition(".")[0]
        weights = (f"{module}.gate_up_proj", f"{module}.down_proj")
        return all(w in self.quantized and w not in unpack for w in weights)

    def layout_op(self, hf_name: str, unpack) -> GptOssExpertsLayout | None:
        """The op putting a float gpt-oss expert tensor in transformers' layout, or None."""
        part = self.experts_layout.get(hf_name)
        if part is None or self.experts_packed(hf_name, unpack):
            return None
        return GptOssExpertsLayout(part)


def _layer_count(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.num_hidden_layers)


# transformers 5 fuses each MoE layer's experts into `gate_up_proj` [E, 2I, H] and `down_proj`
# [E, H, I]; llama.cpp stores gate, up and down as separate [E, rows, cols] tensors.
_EXPERT_PARTS = {"gate_up_proj": ("ffn_gate_exps", "ffn_up_exps"), "down_proj": ("ffn_down_exps",)}
# The parts whose float layout differs between llama.cpp and transformers' GptOssExperts (the down
# bias [E, H] is the same in both).
_GPT_OSS_PARTS = {"gate_up_proj": "gate_up", "gate_up_proj_bias": "gate_up_bias", "down_proj": "down"}


def gpt_oss_part(hf_name: str, arch: str) -> str | None:
    """The `GptOssExpertsLayout` part a parameter of transformers' gpt-oss experts is, or None for
    any other parameter (or architecture)."""
    module_name, _, param = hf_name.rpartition(".")
    if ARCH_RULES.get(arch, ArchRules()).experts_interleaved and module_name.endswith(".experts"):
        return _GPT_OSS_PARTS.get(param)
    return None


def gguf_names(model, arch: str) -> dict[str, list[str]]:
    """model parameter -> the GGUF tensor name(s) llama.cpp's converter writes it as (two for a
    fused expert `gate_up_proj`: gate, then up). Parameters llama.cpp has no name for are left out."""
    name_map = get_tensor_name_map(_ARCH_BY_NAME[arch], _layer_count(model.config))
    params = dict(model.named_parameters(remove_duplicate=False))
    out: dict[str, list[str]] = {}
    for module_name, _ in model.named_modules():
        m = re.search(r"\.(\d+)\.(?:\w+\.)*experts$", module_name)
        if m is None or f"{module_name}.gate_up_proj" not in params:
            continue
        for param, parts in _EXPERT_PARTS.items():
            for hf, suffix in ((f"{module_name}.{param}", "weight"), (f"{module_name}.{param}_bias", "bias")):
                if hf in params:
                    out[hf] = [f"blk.{m[1]}.{part}.{suffix}" for part in parts]
    for hf_name in model.state_dict():
        if hf_name in out:
            continue
        base, _, suffix = hf_name.rpartition(".")
        if (gguf_base := name_map.get_name(base)) is not None:
            out[hf_name] = [f"{gguf_base}.{suffix}"]
        elif (gguf_base := name_map.get_name(hf_name)) is not None:
            # A bare parameter of its module (gpt-oss's `self_attn.sinks`): llama.cpp's converter
            # names the tensor after it and adds `.weight`.
            out[hf_name] = [f"{gguf_base}.weight"]
    return out


def plan_tensors(model, gguf: GgufFile) -> TensorPlan:
    """Match every tensor of the file to a parameter of `model` (on the meta device)."""
    arch = gguf.architecture
    rules = ARCH_RULES[arch]
    text = model.config.get_text_config()

    hf_names: dict[str, str] = {}
    merges: dict[str, list[str]] = {}
    quantized: set[str] = set()
    experts_layout: dict[str, str] = {}
    for hf_name, names in gguf_names(model, arch).items():
        if not all(n in gguf.tensors for n in names) or any(n in hf_names for n in names):
            continue
        if all(gguf.tensors[n].type.quantized for n in names):
            quantized.add(hf_name)
        if (part := gpt_oss_part(hf_name, arch)) is not None:
            experts_layout[hf_name] = part
        if len(names) == 1:
            hf_names[names[0]] = hf_name
            continue
        # A fused parameter loads from virtual per-part names, joined by a converter.
        module_name = hf_name.rpartition(".")[0]
        virtual = [f"{module_name}.{n.split('.')[2]}.{n.split('.')[-1]}" for n in names]
        hf_names.update(zip(names, virtual))
        merges[hf_name] = virtual

    rope_rows: dict[str, RopeUnpermuteRows] = {}
    plus_one: set[str] = set()
    reshape: dict[str, tuple[int, ...]] = {}
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for gguf_name, hf_name in hf_names.items():
        info, param = gguf.tensors[gguf_name], params.get(hf_name)
        # e.g. Qwen2-MoE's shared-expert gate: a [hidden] vector in the file, a [1, hidden] Linear here
        if param is not None and not info.type.quantized and tuple(param.shape) != info.shape:
            reshape[hf_name] = tuple(param.shape)
        if rules.rope_permuted and re.search(r"\.attn_(q|k)\.(weight|bias)$", gguf_name):
            heads = text.num_attention_heads if ".attn_q." in gguf_name else text.num_key_value_heads
            rope_rows[hf_name] = RopeUnpermuteRows(heads)
        if rules.norm_plus_one and re.search(r"norm\.weight$", gguf_name):
            plus_one.add(hf_name)
    unmatched = [name for name in gguf.tensors if name not in hf_names]
    return TensorPlan(hf_names, merges, rope_rows, plus_one, reshape, unmatched, quantized, experts_layout)


_LAYER = re.compile(r"^blk\.(\d+)\.")


def _generalise(gguf_name: str, hf_name: str) -> tuple[str, str]:
    """A (source regex, target) pair that renames `gguf_name` to `hf_name` and the same tensor
    of every other layer: the layer index becomes a capture group."""
    m = _LAYER.match(gguf_name)
    if m is not None and hf_name.count(f".{m[1]}.") == 1:
        idx = m[1]
        src = "^" + re.escape(gguf_name).replace(re.escape(f"blk.{idx}."), r"blk\.(\d+)\.", 1) + "$"
        return src, hf_name.replace(f".{idx}.", r".\1.", 1)
    return "^" + re.escape(gguf_name) + "$", hf_name


def _hf_pattern(hf_name: str) -> str:
    """A regex matching `hf_name` in any layer, with the layer index captured."""
    m = re.search(r"\.(\d+)\.", hf_name)
    if m is None:
        return "^" + re.escape(hf_name) + "$"
    return "^" + re.escape(hf_name[: m.start()]) + r"\.(\d+)\." + re.escape(hf_name[m.end() :]) + "$"


def _exact(name: str) -> str:
    return "^" + re.escape(name) + "$"


def weight_transforms(plan: TensorPlan, unpack: dict[str, dict[str, int]], dtype) -> list:
    """transformers `WeightRenaming` / `WeightConverter` entries loading the file into the model.

    `unpack` names the model parameters to dequantize on the way in, with the ggml type of each
    of their sources; every other quantized tensor arrives as its raw blocks, only renamed,
    concatenated or moved row-wise.
    """
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    from .conversions import ConcatRows, NormPlusOne, Unpack

    renames = dict(_generalise(g, h) for g, h in plan.hf_names.items())
    transforms: list = [WeightRenaming(src, tgt) for src, tgt in renames.items()]

    def ops_for(hf_name: str) -> list:
        ops = [ConcatRows()] if hf_name in plan.merges else []
        op = plan.conversion(hf_name)
        if isinstance(op, NormPlusOne):
            op = NormPlusOne(dtype)
        layout = plan.layout_op(hf_name, unpack)
        return ops + [o for o in (op, layout) if o is not None]

    # A key is claimed by the first converter that matches it: exact (unpacked) ones go first.
    for hf_name, types in unpack.items():
        sources = [_exact(src) for src in plan.sources(hf_name)]
        ops = [Unpack({_exact(src): t for src, t in types.items()}, dtype), *ops_for(hf_name)]
        transforms.append(WeightConverter(sources, hf_name, ops))
    # Float tensors of gpt-oss experts left unpacked change layout, layer by layer (another layer's
    # experts may be packed and keep llama.cpp's).
    relaid = {h for h in plan.experts_layout if h not in unpack and plan.layout_op(h, unpack) is not None}
    for hf_name in sorted(relaid):
        transforms.append(WeightConverter([_exact(src) for src in plan.sources(hf_name)], hf_name, ops_for(hf_name)))
    generic: dict[tuple[str, ...], str] = {}
    for hf_name in plan.rope_rows.keys() | plan.plus_one | plan.merges.keys() | plan.reshape.keys():
        if hf_name not in unpack and hf_name not in relaid:
            generic.setdefault(tuple(_hf_pattern(src) for src in plan.sources(hf_name)), hf_name)
    for patterns, hf_name in generic.items():
        target = re.sub(r"\.(\d+)\.", r".\\1.", hf_name, count=1)
        transforms.append(WeightConverter(list(patterns), target, ops_for(hf_name)))
    return transforms


def experts_to_llamacpp(model, packed: Iterable[str], arch: str, float_weights: bool = True) -> list:
    """transformers `WeightConverter`s putting a float gpt-oss checkpoint's experts in llama.cpp's
    layout as they load, for each experts module among the `packed` parameters (quantized on load
    into a `GgufExperts`, which holds its blocks and its gate/up bias in llama.cpp's order).
    `float_weights=False`: the biases only (the weights come as MXFP4, `experts_from_mxfp4`)."""
    from transformers.core_model_loading import WeightConverter

    from .conversions import GptOssExpertsLayout

    modules = sorted({name.rpartition(".")[0] for name in packed if gpt_oss_part(name, arch) is not None})
    transforms = []
    for module_name in modules:
        module = model.get_submodule(module_name)
        for param, part in _GPT_OSS_PARTS.items():
            if not float_weights and not param.endswith("_bias"):
                continue
            if getattr(module, param, None) is not None:
                name = f"{module_name}.{param}"
                transforms.append(WeightConverter([_exact(name)], name, [GptOssExpertsLayout(part, to_llamacpp=True)]))
    return transforms


def experts_from_mxfp4(model, types: dict[str, str], arch: str, dtype) -> list:
    """transformers `WeightConverter`s for a gpt-oss checkpoint whose experts are openai's MXFP4
    (`<param>_blocks` + `<param>_scales`): repacked byte for byte into ggml MXFP4 rows in llama.cpp's
    layout, then kept as they are when `types` (packed parameter -> ggml type) says MXFP4,
    dequantized (exactly, in float32) and quantized to another type, or, for experts left float,
    dequantized into transformers' own layout in `dtype`."""
    from transformers.core_model_loading import WeightConverter

    from ..ggml.types import ggml_type
    from .conversions import GptOssExpertsLayout, Mxfp4Repack, Quantize, Unpack

    mxfp4 = ggml_type("MXFP4").id
    transforms = []
    for name, _ in model.named_parameters():
        part = gpt_oss_part(name, arch)
        if part not in ("gate_up", "down"):
            continue
        ops = [Mxfp4Repack(part)]
        t = types.get(name)
        if t is None:
            ops += [Unpack({name: mxfp4}, dtype), GptOssExpertsLayout(part)]
        elif ggml_type(t).id != mxfp4:
            ops += [Unpack({name: mxfp4}, torch.float32), Quantize({name: t})]
        transforms.append(WeightConverter([_exact(f"{name}_blocks"), _exact(f"{name}_scales")], name, ops))
    return transforms


def apply_rope_factors(model, factors) -> None:
    """Divide every rotary embedding's inverse frequencies by llama.cpp's per-frequency factors.

    Llama 3.1-style files carry their rope scaling as a `rope_freqs` tensor (llama.cpp divides
    each rotation frequency by it) rather than as config keys; dividing transformers' default
    inverse frequencies the same way rotates by exactly llama.cpp's angles.
    """
    import torch

    factors = torch.as_tensor(factors, dtype=torch.float32)
    for module in model.modules():
        inv = getattr(module, "inv_freq", None)
        if isinstance(inv, torch.Tensor) and inv.shape == factors.shape:
            module.inv_freq = inv / factors.to(inv.device)
            if isinstance(getattr(module, "original_inv_freq", None), torch.Tensor):
                module.original_inv_freq = module.inv_freq.clone()
