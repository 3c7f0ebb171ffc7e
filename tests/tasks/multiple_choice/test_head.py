"""The multiple-choice head against Hugging Face's BertForMultipleChoice (a committed golden:
tests/data/multiple_choice/hf_tiny), and conversion to and from every format with the head
kept."""

import json
import os

import numpy as np
import pytest
from safetensors import safe_open

from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model import provenance
from bert_tf.tasks.multiple_choice import head as mc_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

HF_TINY = os.path.join(helpers.TEST_DATA, "multiple_choice", "hf_tiny")


def _golden():
  with open(os.path.join(HF_TINY, "golden.json"), encoding="utf-8") as f:
    return json.load(f)


def _logits(model, golden):
  """Our per-choice logits of the golden's [examples, choices, length] inputs, as [E, C]."""
  ids = np.asarray(golden["input_ids"], np.int32)
  examples, choices, length = ids.shape
  inputs = {"input_word_ids": ids.reshape(-1, length),
            "input_mask": np.asarray(golden["attention_mask"], np.int32).reshape(-1, length),
            "input_type_ids": np.asarray(golden["token_type_ids"], np.int32).reshape(-1, length)}
  return model(inputs, training=False)["logits"].numpy().reshape(examples, choices)


def test_hugging_face_multiple_choice_logits():
  golden = _golden()
  config = checkpoints.config_beside(os.path.join(HF_TINY, "model.safetensors"))
  model = mc_head.build_multiple_choice_model(config)
  report = checkpoints.load_weights(model, HF_TINY, strict=True)
  assert "output_weights" in report.loaded
  assert checkpoints.model_head(model) == mc_head.MULTIPLE_CHOICE
  np.testing.assert_allclose(_logits(model, golden), golden["logits"], atol=2e-5)
  info = provenance.hf_task_info({"architectures": ["BertForMultipleChoice"]})
  assert info == {"head": mc_head.MULTIPLE_CHOICE}


def test_conversion_keeps_the_head_in_every_format(tmp_path):
  golden = _golden()
  tf1 = str(tmp_path / "tf1" / "model.ckpt")
  conversion.convert_checkpoint(HF_TINY, tf1)
  info = json.loads((tmp_path / "tf1" / "task_info.json").read_text())
  assert info["head"] == mc_head.MULTIPLE_CHOICE
  values = checkpoints.read_weights(tf1, source_format="tf1")
  assert values["output_weights"].shape == (1, 16) and values["output_bias"].shape == (1,)
  keras_file = str(tmp_path / "mc.keras")
  conversion.convert_checkpoint(tf1, keras_file)
  hf = str(tmp_path / "hf" / "model.safetensors")
  conversion.convert_checkpoint(keras_file, hf, do_lower_case=True,
                                vocab_file=os.path.join(HF_TINY, "vocab.txt"))
  hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert hf_config["architectures"] == ["BertForMultipleChoice"]
  with safe_open(hf, framework="numpy") as f:  # Hugging Face's own names
    assert f.get_tensor("classifier.weight").shape == (1, 16)
    assert f.get_tensor("classifier.bias").shape == (1,)
  config = checkpoints.config_beside(hf)
  for source in (tf1, keras_file, hf):
    model, _ = conversion.converted_model(config, checkpoints.read_weights(source), source,
                                          checkpoints.detect_format(source))
    assert checkpoints.model_head(model) == mc_head.MULTIPLE_CHOICE, source
    np.testing.assert_allclose(_logits(model, golden), golden["logits"], atol=2e-5)


def test_a_multiple_choice_head_is_never_loaded_as_a_classifier(tmp_path):
  config = checkpoints.config_beside(os.path.join(HF_TINY, "model.safetensors"))
  classifier = classifier_head.build_classifier_model(config, None)
  report = checkpoints.load_weights(classifier, HF_TINY)
  assert "output_weights" not in report.loaded and "bert/pooler/dense/kernel" in report.loaded
  # A head recorded as multiple choice has one output (a score per choice).
  folder = tmp_path / "two"
  folder.mkdir()
  provenance.write_task_info(str(folder), {"head": mc_head.MULTIPLE_CHOICE})
  with pytest.raises(conversion.HeadError, match="a multiple-choice head has one output"):
    conversion.source_head(str(folder / "model.ckpt"), "tf1",
                           {"output_weights": np.zeros((2, 16)), "output_bias": np.zeros(2)})
