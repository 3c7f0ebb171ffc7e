"""Exports a trained pretraining model as plain SavedModels with serving signatures.

Layout written by export_saved_models(model, config, export_dir):
  export_dir/encoder/       SavedModel of the encoder; signature "serving_default" takes int32
                            input_word_ids, input_mask, input_type_ids [B, S] and returns
                            sequence_output [B, S, H] and pooled_output [B, H].
  export_dir/pretraining/   SavedModel of the pretraining model; signature "serving_default"
                            takes int32 input_ids, input_mask, segment_ids [B, S] and
                            masked_lm_positions [B, P] and returns masked_lm_logits [B, P, V]
                            and next_sentence_logits [B, 2].
  export_dir/bert_config.json, export_dir/vocab.txt (when given), export_dir/data_metadata.json
  (when given).
The exported models compute in float32 whatever precision training used.

As a command, `python -m bert_tf.export --checkpoint=... --vocab_file=... --export_dir=...` writes
the TF Serving models (raw text in) described in bert_tf/serving.py.
"""

import json
import os
from typing import Any, Mapping, Optional

import keras
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.config import BertConfig
from bert_tf.encoder import ENCODER_INPUTS, build_encoder
from bert_tf.heads import PRETRAINING_INPUTS, build_pretraining_model


def _float32_copies(model, config: BertConfig):
  """Fresh float32 encoder and pretraining models holding `model`'s weights.

  Built outside any distribution strategy, so that the SavedModels hold plain variables.
  """
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("float32")
  try:
    pretraining = build_pretraining_model(config)
    encoder = build_encoder(config)
  finally:
    keras.config.set_dtype_policy(previous)
  values = checkpoints.get_original_weights(model)
  checkpoints.set_original_weights(pretraining, values, source=model.name)
  # The encoder lacks the cls/ heads: they are reported as unexpected, not an error.
  checkpoints.set_original_weights(encoder, values, source=model.name)
  return encoder, pretraining


def _save(model, names, outputs, path):
  """Saves `model` as a SavedModel whose serving signature takes int32 [B, None] `names`."""
  module = tf.Module()
  module.model = model
  spec = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in names}

  @tf.function(input_signature=[spec])
  def serve(inputs):
    result = model(inputs, training=False)
    return {key: result[key] for key in outputs}

  module.serve = serve
  tmp = path + ".tmp-export"
  if tf.io.gfile.exists(tmp):
    tf.io.gfile.rmtree(tmp)
  tf.saved_model.save(module, tmp, signatures={"serving_default": serve})
  if tf.io.gfile.exists(path):
    tf.io.gfile.rmtree(path)
  tf.io.gfile.rename(tmp, path)


def _write_text(path: str, text: str) -> None:
  tmp = path + ".tmp"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def export_saved_models(model: keras.Model, config: BertConfig, export_dir: str,
                        vocab_file: Optional[str] = None,
                        data_metadata: Optional[Mapping[str, Any]] = None) -> str:
  """Writes the encoder and pretraining SavedModels plus config, vocab and data metadata.

  Args:
    model: a trained pretraining model (build_pretraining_model), any dtype policy, possibly
      created under a distribution strategy.
    config: its BertConfig (written as bert_config.json).
    export_dir: the directory to create (replaced if it exists); any tf.io.gfile path.
    vocab_file: copied to export_dir/vocab.txt when given.
    data_metadata: the training data's metadata, written to export_dir/data_metadata.json.

  Returns:
    export_dir.
  """
  tf.io.gfile.makedirs(export_dir)
  encoder, pretraining = _float32_copies(model, config)
  _save(encoder, ENCODER_INPUTS, ("sequence_output", "pooled_output"),
        os.path.join(export_dir, "encoder"))
  _save(pretraining, PRETRAINING_INPUTS, ("masked_lm_logits", "next_sentence_logits"),
        os.path.join(export_dir, "pretraining"))
  config.to_json_file(os.path.join(export_dir, "bert_config.json"))
  if vocab_file:
    tf.io.gfile.copy(vocab_file, os.path.join(export_dir, "vocab.txt"), overwrite=True)
  if data_metadata is not None:
    _write_text(os.path.join(export_dir, "data_metadata.json"),
                json.dumps(dict(data_metadata), indent=2) + "\n")
  return export_dir


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from bert_tf import serving  # pylint: disable=g-import-not-at-top
  serving.define_flags()
  app.run(serving.main)
