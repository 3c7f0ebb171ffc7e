"""TF Hub's Reusable SavedModel API on the exports (issue: fine-tuning through hub.KerasLayer).

The exports of a tiny random model (the command line's, shared with test_serving.py) are loaded in this process (tf.saved_model.load, as hub.load
does) and checked against the Python tokenizer, the original's packing and the Keras models; a
fresh process that never imports bert_tf runs TensorFlow's "classify text with BERT" pattern
with the real tensorflow_hub client (tests/serving/tf_hub_client_check.py).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.serving.pretrained import float32_models
from bert_tf.tasks.classifier import serving_module as classifier_serving
from bert_tf.tasks.classifier import head as classifier_head

from tests.helpers import REPO_ROOT
from tests.serving.shared import CONFIG, SEQ_LENGTH, VOCAB
from tests.serving.test_serving import python_pack

# Every test here uses the exports of the command line (hub_exports): the slow tier.
pytestmark = pytest.mark.slow

# Ordinary text, empty, longer than SEQ_LENGTH, accents and CJK, a word split into pieces,
# punctuation inside words.
TEXTS = ["The man went to the store.", "", "word " * 30 + "end", "Café naïve 東京 déjà-vu!",
         "unaffable embeddings", "Mr. O'Neil's e-mail: a@b.com"]
TEXTS_B = ["He bought a gallon of milk.", "Penguins are flightless.", "", "short " * 25, "",
           "yes"]
LABELS = [1, 0, 1, 0, 1, 0]
# Lengths for bert_pack_inputs: the export's, shorter (truncation) and longer than every text.
SEQ_LENGTHS = [SEQ_LENGTH, 7, 48]
LABEL_NAMES = ["no", "yes"]

# A restored SavedModel's graph and the eager Keras call can block their oneDNN matmuls
# differently, so float32 results differ by rounding (seen: 1.1e-5 in pooled_output).
ATOL = 3e-5


@pytest.fixture(scope="module")
def hub_exports(exported, tmp_path_factory):
  """The serving tests' export (the command line's, from a tiny random model) and a
  classifier export on its weights, with the Keras models they hold."""
  paths, pretraining, tokenizer, root = exported
  paths = dict(paths)
  weights = checkpoints.get_original_weights(pretraining)
  encoder, _ = float32_models(CONFIG, weights)
  keras.utils.set_random_seed(11)
  classifier = classifier_head.build_classifier_model(CONFIG, len(LABEL_NAMES))
  checkpoints.set_original_weights(classifier, weights, strict=False, source="test")
  work = tmp_path_factory.mktemp("tf_hub")
  paths["classifier"] = classifier_serving.export_classifier_model(
      classifier, CONFIG, VOCAB, str(work / "export"), LABEL_NAMES, pair=True,
      seq_length=SEQ_LENGTH, warmup=False)
  return paths, encoder, classifier, tokenizer, work


def word_ids(tokenizer, text):
  """The Python tokenizer's ids grouped by BasicTokenizer word."""
  return [tokenizer.wordpiece_tokenizer.tokenize_words_to_ids([word])
          for word in tokenizer.basic_tokenizer.tokenize(text)]


def packed_reference(tokenizer, texts, texts_b, seq_length):
  rows = [python_pack(tokenizer, tokenizer.tokenize_to_ids(a),
                      tokenizer.tokenize_to_ids(b) if texts_b else [], seq_length)
          for a, b in zip(texts, texts_b or [""] * len(texts))]
  return {name: np.array([row[i] for row in rows], np.int32)
          for i, name in enumerate(("input_word_ids", "input_mask", "input_type_ids"))}


def keras_inputs(packed):
  return {name: tf.constant(packed[name]) for name in ENCODER_INPUTS}


def assert_packed(actual, expected):
  for name in ENCODER_INPUTS:
    np.testing.assert_array_equal(np.asarray(actual[name]), expected[name], err_msg=name)
    assert np.asarray(actual[name]).dtype == np.int32


# === In this process (tf.saved_model.load is what hub.load calls) ===


def test_preprocessor_call_tokenize_and_pack_equal_the_python_tokenizer(hub_exports):
  paths, _, _, tokenizer, _ = hub_exports
  preprocessor = tf.saved_model.load(paths["preprocessor"])
  assert_packed(preprocessor(tf.constant(TEXTS)),
                packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH))
  tokens = preprocessor.tokenize(tf.constant(TEXTS))
  assert (tokens.dtype, tokens.ragged_rank) == (tf.int32, 2)
  assert tokens.to_list() == [word_ids(tokenizer, t) for t in TEXTS]
  tokens_b = preprocessor.tokenize(tf.constant(TEXTS_B))
  for seq_length in SEQ_LENGTHS:
    single = preprocessor.bert_pack_inputs([tokens], seq_length=seq_length)
    assert_packed(single, packed_reference(tokenizer, TEXTS, None, seq_length))
    pair = preprocessor.bert_pack_inputs([tokens, tokens_b], seq_length=seq_length)
    assert_packed(pair, packed_reference(tokenizer, TEXTS, TEXTS_B, seq_length))
    # Rank-1 segments and int64 ids (another tokenizer's output) pack the same.
    flat = [tf.cast(t.merge_dims(1, 2), tf.int64) for t in (tokens, tokens_b)]
    assert_packed(preprocessor.bert_pack_inputs(flat, tf.constant(seq_length)),
                  packed_reference(tokenizer, TEXTS, TEXTS_B, seq_length))
  # Without seq_length: the export's.
  assert_packed(preprocessor.bert_pack_inputs([tokens]),
                packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH))
  # The TF Serving signatures are still there.
  assert sorted(preprocessor.signatures) == ["preprocess", "serving_default"]


def test_bert_pack_inputs_refuses_bad_segments(hub_exports):
  paths, _, _, _, _ = hub_exports
  preprocessor = tf.saved_model.load(paths["preprocessor"])
  tokens = preprocessor.tokenize(tf.constant(TEXTS))
  # Three segments have no traced function: TF names the mismatch.
  with pytest.raises(ValueError, match="Could not find matching concrete function"):
    preprocessor.bert_pack_inputs([tokens] * 3, seq_length=SEQ_LENGTH)
  # Segments of different batch sizes: refused (at shape inference when the sizes are known).
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="same batch size|Dimensions must be equal"):
    preprocessor.bert_pack_inputs([tokens, tokens[:2]], seq_length=SEQ_LENGTH)
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least 2"):
    preprocessor.bert_pack_inputs([tokens], seq_length=1)
  with pytest.raises(tf.errors.InvalidArgumentError, match="at most 64"):
    preprocessor.bert_pack_inputs([tokens], seq_length=65)


def test_encoder_is_a_reusable_saved_model(hub_exports):
  paths, encoder, _, tokenizer, _ = hub_exports
  loaded = tf.saved_model.load(paths["encoder"])
  # The saved attributes: every weight trainable, the dropout seed states besides.
  assert [v.shape for v in loaded.trainable_variables] == [
      v.shape for v in encoder.trainable_variables]
  assert len(loaded.trainable_variables) == len(encoder.trainable_weights) == 39
  assert len(loaded.variables) == len(encoder.variables) > len(loaded.trainable_variables)
  assert list(loaded.regularization_losses) == []
  inputs = keras_inputs(packed_reference(tokenizer, TEXTS, TEXTS_B, 11))
  expected = encoder(inputs, training=False)
  for training in (None, False):
    kwargs = {} if training is None else dict(training=training)
    outputs = loaded(inputs, **kwargs)
    for key in ("pooled_output", "sequence_output"):
      np.testing.assert_allclose(outputs[key].numpy(), expected[key].numpy(), atol=ATOL)
    np.testing.assert_array_equal(outputs["default"].numpy(), outputs["pooled_output"].numpy())
    assert len(outputs["encoder_outputs"]) == CONFIG.num_hidden_layers
    for got, want in zip(outputs["encoder_outputs"], expected["encoder_outputs"]):
      np.testing.assert_allclose(got.numpy(), want.numpy(), atol=ATOL)
  # Dropout (0.1) is on only with training=True.
  dropped = loaded(inputs, training=True)["sequence_output"].numpy()
  assert np.abs(dropped - expected["sequence_output"].numpy()).max() > 1e-2
  # serving_default is unchanged for TF Serving.
  served = loaded.signatures["serving_default"](**inputs)
  assert served["encoder_outputs"].shape == (len(TEXTS), CONFIG.num_hidden_layers, 11, CONFIG.hidden_size)


def test_text_and_classifier_exports_are_callable_with_their_weights(hub_exports):
  paths, encoder, classifier, tokenizer, _ = hub_exports
  text = tf.saved_model.load(paths["text"])
  assert len(text.trainable_variables) == len(encoder.trainable_weights)
  outputs = text(tf.constant(TEXTS))
  expected = encoder(keras_inputs(packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH)))
  np.testing.assert_allclose(outputs["pooled_output"].numpy(),
                             expected["pooled_output"].numpy(), atol=ATOL)

  loaded = tf.saved_model.load(paths["classifier"])
  assert len(loaded.trainable_variables) == len(classifier.trainable_weights)
  for texts_b in (None, TEXTS_B):
    inputs = tf.constant(TEXTS) if texts_b is None else dict(text=tf.constant(TEXTS),
                                                            text_b=tf.constant(TEXTS_B))
    outputs = loaded(inputs)
    logits = classifier(keras_inputs(packed_reference(tokenizer, TEXTS, texts_b, SEQ_LENGTH)),
                        training=False)["logits"].numpy()
    np.testing.assert_allclose(outputs["logits"].numpy(), logits, atol=ATOL)
    np.testing.assert_allclose(outputs["probabilities"].numpy(),
                               tf.nn.softmax(logits).numpy(), atol=ATOL)
    # And the TF Serving signature agrees.
    served = loaded.signatures["classify"](
        text=tf.constant(TEXTS), text_b=tf.constant(texts_b or [""] * len(TEXTS)))
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               outputs["probabilities"].numpy(), atol=ATOL)


# === TF Hub's own client, in a fresh process ===


@pytest.mark.slow
def test_tf_hub_client_fine_tunes_the_exports(hub_exports):
  paths, encoder, classifier, tokenizer, root = hub_exports
  spec = dict(paths, texts=TEXTS, texts_b=TEXTS_B, labels=LABELS, seq_lengths=SEQ_LENGTHS)
  spec_file = root / "hub_spec.json"
  spec_file.write_text(json.dumps(spec))
  out = root / "hub_out"
  out.mkdir()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("PYTHONPATH", None)  # the client must not see bert_tf
  result = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "tests", "serving", "tf_hub_client_check.py"),
       str(spec_file), str(out)], cwd=str(root), env=env, capture_output=True, text=True,
      timeout=900)
  assert result.returncode == 0, result.stderr[-4000:]
  report = json.loads((out / "report.json").read_text())
  got = dict(np.load(out / "outputs.npz"))
  assert report["bert_tf_modules"] == []

  # hub.KerasLayer(encoder, trainable=True): every weight registered, fit moved them. The
  # attention key biases get no gradient but rounding noise (softmax ignores a constant per
  # row), so those (one per layer) may stay.
  n = len(encoder.trainable_weights)
  for name in ("encoder_fit", "text_fit"):
    fitted = report[name]
    assert fitted["trainable"] == n, name
    assert fitted["changed"] >= n - CONFIG.num_hidden_layers, name
    assert fitted["non_trainable"] > 0, name  # the dropout seed states
  fitted = report["classifier_fit"]
  n = len(classifier.trainable_weights)
  assert fitted["trainable"] == n
  assert fitted["changed"] >= n - CONFIG.num_hidden_layers
  # A few small steps on one batch lower its loss (dropout off): the gradient flows right
  # through the restored functions.
  assert fitted["loss_after"] < fitted["loss_before"], fitted
  # The tutorial's save and reload gives the same predictions.
  np.testing.assert_allclose(got["model/reloaded_predictions"], got["model/predictions"],
                             atol=ATOL)
  assert report["encoder_attributes"] == dict(
      variables=len(encoder.variables), trainable_variables=len(encoder.trainable_weights),
      regularization_losses=0)

  # The preprocessor's call, tokenize + bert_pack_inputs: the Python tokenizer's ids.
  assert_packed({k[len("call/"):]: v for k, v in got.items() if k.startswith("call/")},
                packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH))
  assert (report["tokenize_dtype"], report["tokenize_ragged_rank"]) == ("int32", 2)
  tokens = tf.RaggedTensor.from_row_splits(
      tf.RaggedTensor.from_row_splits(got["tokenize/values"], got["tokenize/word_splits"]),
      got["tokenize/text_splits"])
  assert tokens.to_list() == [word_ids(tokenizer, t) for t in TEXTS]
  for seq_length in SEQ_LENGTHS:
    for name, texts_b in (("single", None), ("pair", TEXTS_B)):
      prefix = f"pack/{name}/{seq_length}/"
      assert_packed({k[len(prefix):]: v for k, v in got.items() if k.startswith(prefix)},
                    packed_reference(tokenizer, TEXTS, texts_b, seq_length))
  assert_packed({k[len("pack/default/"):]: v for k, v in got.items()
                 if k.startswith("pack/default/")},
                packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH))
  assert_packed({k[len("pack_layers/"):]: v for k, v in got.items()
                 if k.startswith("pack_layers/")},
                packed_reference(tokenizer, TEXTS, TEXTS_B, SEQ_LENGTHS[0]))

  # The encoder with training=False equals the Keras model; training=True applies dropout.
  expected = encoder(keras_inputs(packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH)),
                     training=False)
  np.testing.assert_allclose(got["encoder/False/pooled_output"],
                             expected["pooled_output"].numpy(), atol=ATOL)
  np.testing.assert_allclose(got["encoder/False/sequence_output"],
                             expected["sequence_output"].numpy(), atol=ATOL)
  np.testing.assert_allclose(got["encoder/False/encoder_outputs"],
                             np.stack([v.numpy() for v in expected["encoder_outputs"]], 1),
                             atol=ATOL)
  assert np.abs(got["encoder/True/sequence_output"]
                - expected["sequence_output"].numpy()).max() > 1e-2

  # The classifier export before fine-tuning equals the Keras classifier, for pairs too.
  logits = classifier(keras_inputs(packed_reference(tokenizer, TEXTS, None, SEQ_LENGTH)),
                      training=False)["logits"].numpy()
  np.testing.assert_allclose(got["classifier/logits_before"], logits, atol=ATOL)
  pair_logits = classifier(keras_inputs(packed_reference(tokenizer, TEXTS, TEXTS_B, SEQ_LENGTH)),
                           training=False)["logits"].numpy()
  np.testing.assert_allclose(got["classifier/pair_probabilities"],
                             tf.nn.softmax(pair_logits).numpy(), atol=ATOL)
