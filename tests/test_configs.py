"""Our config builders against transformers' own (slow, gguf-py based) GGUF config reader."""
import pytest
from transformers import AutoConfig
from transformers.integrations.gguf import get_gguf_config, read_gguf_metadata
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

import gguf_quant  # noqa: F401  (registers the builders)

FIELDS = [
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "sliding_window", "rope_parameters", "bos_token_id", "eos_token_id",
    "pad_token_id", "query_pre_attn_scalar", "layer_types",
]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["smollm2_path", "gemma3_path"])
def test_fast_config_equals_transformers_reader(request, fixture):
    path = request.getfixturevalue(fixture)
    metadata, names = read_gguf_metadata(str(path))
    ours = get_gguf_config(metadata, names)
    theirs = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
    a = AutoConfig.for_model(**ours)
    b = AutoConfig.for_model(**theirs)
    assert type(a) is type(b)
    for field in FIELDS:
        assert getattr(a, field, None) == getattr(b, field, None), field
