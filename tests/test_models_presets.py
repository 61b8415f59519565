"""The presets' parameter counts match the published figures within 0.5%."""

import pytest

from scalelab.models import PRESETS, preset

# (preset, published parameters, source)
PUBLISHED = [
    ("llama3-8b", 8.03e9, "huggingface.co/meta-llama/Meta-Llama-3-8B: 'Model size 8.03B params'"),
    ("llama3-70b", 70.6e9,
     "huggingface.co/meta-llama/Meta-Llama-3-70B: 'Model size 70.6B params'"),
    ("llama3-405b", 405.9e9,
     "huggingface.co/meta-llama/Llama-3.1-405B: 405.9B parameters (safetensors total "
     "405,853,388,800 rounded)"),
    ("llama2-7b", 6.74e9, "huggingface.co/meta-llama/Llama-2-7b-hf: 'Model size 6.74B params'"),
    ("gpt2", 124.4e6, "huggingface.co/openai-community/gpt2: 124M (124,439,808 in the "
     "released checkpoint, the tied head counted once)"),
]


@pytest.mark.parametrize("name,published,source", PUBLISHED)
def test_param_count_matches_published(name, published, source):
    count = preset(name).param_count()
    assert abs(count / published - 1) <= 0.005, (name, count, published, source)


def test_gpt2_count_is_the_checkpoints_exactly():
    # wte 50257x768 + wpe 1024x768 + 12 blocks x 7,087,872 + ln_f 1,536
    assert preset("gpt2").param_count() == 124_439_808


def test_every_preset_names_its_source_and_splits_its_count():
    for cfg in PRESETS.values():
        assert cfg.source
        assert cfg.param_count() == (cfg.embedding_params() + cfg.layers * cfg.block_params()
                                     + cfg.norm_params() + cfg.head_params())


def test_unknown_preset_names_the_close_ones():
    with pytest.raises(ValueError, match="did you mean llama3-8b"):
        preset("llama3-8")
