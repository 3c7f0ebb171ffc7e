"""BertConfig: JSON round trip, validation messages, and the configs/ presets."""

import json
import os

import pytest
import tensorflow as tf

from bert_tf import config as config_lib
from bert_tf.config import BertConfig, ConfigError
from tests import helpers

CONFIGS_DIR = os.path.join(helpers.REPO_ROOT, "configs")

# The original release's uncased BERT-Base bert_config.json, key for key.
ORIGINAL_BASE_JSON = """{
  "attention_probs_dropout_prob": 0.1,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 512,
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "type_vocab_size": 2,
  "vocab_size": 30522
}"""


def test_reads_original_json_and_writes_it_back_equal():
  cfg = BertConfig.from_json_string(ORIGINAL_BASE_JSON)
  assert cfg.hidden_size == 768 and cfg.num_hidden_layers == 12
  assert cfg.attention_head_size == 64
  assert json.loads(cfg.to_json_string()) == json.loads(ORIGINAL_BASE_JSON)


def test_file_round_trip_through_gfile(tmp_path):
  cfg = config_lib.preset("mini").replace(hidden_act="gelu_exact", hidden_dropout_prob=0.0)
  for path in (str(tmp_path / "bert_config.json"), "ram://configs/bert_config.json"):
    cfg.to_json_file(path)
    assert BertConfig.from_json_file(path) == cfg
    # No temporary file is left beside the output.
    assert tf.io.gfile.listdir(os.path.dirname(path)) == ["bert_config.json"]


@pytest.mark.parametrize("name,layers,hidden,heads", [
    ("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8),
    ("medium", 8, 512, 8), ("base", 12, 768, 12), ("large", 24, 1024, 16)])
def test_configs_dir_matches_presets(name, layers, hidden, heads):
  cfg = BertConfig.from_json_file(os.path.join(CONFIGS_DIR, f"bert_config_{name}.json"))
  assert cfg == config_lib.preset(name)
  assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (layers, hidden, heads)
  assert cfg.intermediate_size == 4 * hidden
  assert (cfg.vocab_size, cfg.type_vocab_size, cfg.max_position_embeddings) == (30522, 2, 512)
  assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.1
  assert cfg.initializer_range == 0.02 and cfg.hidden_act == "gelu"


def test_configs_dir_has_exactly_the_presets():
  names = sorted(f for f in os.listdir(CONFIGS_DIR) if f.endswith(".json"))
  assert names == sorted(f"bert_config_{n}.json" for n in config_lib.PRESETS)


@pytest.mark.parametrize("changes,message", [
    (dict(hidden_size=100, num_attention_heads=12), "hidden_size (100) is not a multiple of num_attention_heads (12)"),
    (dict(num_hidden_layers=0), "num_hidden_layers must be positive, got 0"),
    (dict(vocab_size=-5), "vocab_size must be positive, got -5"),
    (dict(intermediate_size=3.5), "intermediate_size must be an integer, got 3.5"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob must be in [0, 1), got 1.0"),
    (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob must be in [0, 1), got -0.1"),
    (dict(initializer_range=0.0), "initializer_range must be positive, got 0.0"),
    (dict(hidden_act="gelu_fast"), "hidden_act 'gelu_fast' is not one of"),
])
def test_invalid_values_are_named(changes, message):
  values = json.loads(ORIGINAL_BASE_JSON)
  values.update(changes)
  with pytest.raises(ConfigError) as e:
    BertConfig.from_dict(values, source="my_config.json")
  assert "my_config.json" in str(e.value)
  assert message in str(e.value)


def test_several_problems_are_reported_together():
  with pytest.raises(ConfigError) as e:
    BertConfig(num_hidden_layers=0, hidden_dropout_prob=2.0)
  assert "num_hidden_layers" in str(e.value) and "hidden_dropout_prob" in str(e.value)


def test_unknown_keys_are_reported_by_name():
  values = json.loads(ORIGINAL_BASE_JSON)
  values["hidden_activation"] = "gelu"
  values["layer_norm_eps"] = 1e-12
  with pytest.raises(ConfigError, match="unknown key.*hidden_activation, layer_norm_eps"):
    BertConfig.from_dict(values, source="x.json")


def test_activation_names_are_case_insensitive_and_canonicalised():
  assert BertConfig(hidden_act="GELU").hidden_act == "gelu"
  assert BertConfig(hidden_act="Relu").hidden_act == "relu"


def test_hugging_face_activation_names_both_ways():
  """Their "gelu" is the exact form, their "gelu_new" the original's tanh "gelu"; every name of
  ours goes to a Hugging Face name that reads back as the same function."""
  written = {name: config_lib.hf_activation(name) for name in config_lib.HIDDEN_ACTIVATIONS}
  assert written == {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu",
                     "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu",
                     "linear": "linear"}
  read = {name: config_lib.activation_from_hf(name)
          for name in ("gelu", "gelu_new", "gelu_pytorch_tanh", "swish", "gelu_fast")}
  assert read == {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                  "swish": "silu", "gelu_fast": None}
  for name, hf_name in written.items():
    assert (config_lib.HIDDEN_ACTIVATIONS[config_lib.activation_from_hf(hf_name)].function
            == config_lib.HIDDEN_ACTIVATIONS[name].function)


def test_missing_file_and_bad_json_name_the_file(tmp_path):
  with pytest.raises(ConfigError, match="not found: .*nope.json"):
    BertConfig.from_json_file(str(tmp_path / "nope.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{ \"hidden_size\": 768,")
  with pytest.raises(ConfigError, match="bad.json: not valid JSON"):
    BertConfig.from_json_file(str(bad))
  arr = tmp_path / "list.json"
  arr.write_text("[1, 2]")
  with pytest.raises(ConfigError, match="list.json: expected a JSON object"):
    BertConfig.from_json_file(str(arr))


def test_frozen_and_defaults_are_bert_base():
  cfg = BertConfig()
  assert cfg == config_lib.preset("base")
  with pytest.raises(Exception):
    cfg.hidden_size = 10  # type: ignore[misc]


def test_unknown_preset():
  with pytest.raises(ConfigError, match="unknown preset 'huge'"):
    config_lib.preset("huge")
