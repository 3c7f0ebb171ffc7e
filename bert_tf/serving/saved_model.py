"""Exports a trained pretraining model as plain SavedModels with serving signatures.

Layout written by export_saved_models(model, config, export_dir):
  export_dir/encoder/       SavedModel of the encoder; signature "serving_default" takes int32
                            input_word_ids, input_mask, input_type_ids [B, S] and returns
                            sequence_output [B, S, H] and pooled_output [B, H].
  export_dir/pretraining/   SavedModel of the pretraining model; signature "serving_default"
                            takes int32 input_word_ids, input_mask, input_type_ids [B, S] and
                            masked_lm_positions [B, P] and returns masked_lm_logits [B, P, V]
                            and next_sentence_logits [B, 2].
  export_dir/bert_config.json, export_dir/vocab.txt (when given), export_dir/data_metadata.json
  (when given).
The exported models compute in float32 whatever precision training used.

`EXPORTER` (exporting.Exporter of `export_pretraining`) is what run_pretraining hands to
training: at <output_dir>/export/<step>/, these plain SavedModels and, with a vocab, the TF
Serving models of serving/tf_serving.py under serving/, all from one float32 copy of the trained
model (modules.float32_models).
"""

import json
import os
from typing import Any, Mapping, Optional

from absl import logging
import keras
import tensorflow as tf

from bert_tf import io
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.serving import modules
from bert_tf.serving import tf_serving
from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.model.heads import PRETRAINING_INPUTS


def _save(model, names, outputs, path, call=None):
  """Saves `model` as a SavedModel whose serving signature takes int32 [B, None] `names`.

  call(model, inputs) runs the model (default: model(inputs, training=False)).
  """
  module = tf.Module()
  module.model = model
  spec = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in names}

  @tf.function(input_signature=[spec])
  def serve(inputs):
    result = call(model, inputs) if call else model(inputs, training=False)
    return {key: result[key] for key in outputs}

  module.serve = serve
  tf_serving.remove_stale_exports(os.path.dirname(path))  # what a killed export left
  with io.atomic_path(path) as tmp:
    tf.saved_model.save(module, tmp, signatures={"serving_default": serve})


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
  encoder, pretraining = modules.float32_models(
      config, checkpoints.get_original_weights(model), source=model.name)
  return _write_saved_models(encoder, pretraining, config, export_dir, vocab_file,
                             data_metadata)


def _write_saved_models(encoder: keras.Model, pretraining: keras.Model, config: BertConfig,
                        export_dir: str, vocab_file: Optional[str],
                        data_metadata: Optional[Mapping[str, Any]]) -> str:
  """export_saved_models of the float32 models (modules.float32_models) already built."""
  io.makedirs(export_dir)
  # call_encoder: a sequence length of 0 gives empty outputs, as in the serving exports.
  _save(encoder, ENCODER_INPUTS, ("sequence_output", "pooled_output"),
        os.path.join(export_dir, "encoder"), call=modules.call_encoder)
  _save(pretraining, PRETRAINING_INPUTS, ("masked_lm_logits", "next_sentence_logits"),
        os.path.join(export_dir, "pretraining"))
  config.to_json_file(os.path.join(export_dir, "bert_config.json"))
  if vocab_file:
    io.copy(vocab_file, os.path.join(export_dir, "vocab.txt"))
  if data_metadata is not None:
    io.write_text(os.path.join(export_dir, "data_metadata.json"),
                  json.dumps(dict(data_metadata), indent=2) + "\n")
  return export_dir


def export_trained_model(model: keras.Model, config: BertConfig, export_dir: str,
                         vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                         seq_length: int = 128, data_metadata: Optional[Mapping[str, Any]] = None,
                         serving: bool = True) -> str:
  """The exports at the end of pretraining: plain SavedModels, and TF Serving models, of one
  float32 copy of the model.

  Args:
    model: the trained pretraining model.
    config: its config.
    export_dir: where the plain SavedModels go; the TF Serving models go to
      export_dir/serving when `serving` and a vocab_file are given.
    vocab_file: the training vocab (copied beside the exports; needed for TF Serving models).
    do_lower_case: the tokenizer's casing; None takes the data's metadata (default True).
    seq_length: the TF Serving models' packed length.
    data_metadata: the training data's metadata, copied into the exports.
    serving: also write the TF Serving models (raw text in).

  Returns:
    export_dir.
  """
  weights = checkpoints.get_original_weights(model)
  models = modules.float32_models(config, weights, source=model.name)
  _write_saved_models(*models, config, export_dir, vocab_file, data_metadata)
  logging.info("Exported the encoder and the pretraining model to %s", export_dir)
  if serving and vocab_file:
    if do_lower_case is None:
      do_lower_case = bool((data_metadata or {}).get("do_lower_case", True))
    paths = tf_serving.export_serving_models(
        config, weights, vocab_file, os.path.join(export_dir, "serving"),
        do_lower_case=do_lower_case, seq_length=seq_length, data_metadata=data_metadata,
        models=models)
    logging.info("Exported the TF Serving models to %s", ", ".join(sorted(paths.values())))
  return export_dir


def export_pretraining(model: keras.Model, config: BertConfig, settings,
                       info: Optional[Mapping[str, Any]] = None,
                       version: Optional[int] = None) -> str:
  """run_pretraining's export (exporting.Exporter's `export`): export_trained_model to
  <output_dir>/export/<version>/ with the run's vocab_file, do_lower_case, max_seq_length and
  export_serving settings; `info` is the training data's metadata."""
  return export_trained_model(
      model, config, exporting.export_path(settings.output_dir, EXPORTER.model_name, version),
      vocab_file=settings.vocab_file, do_lower_case=settings.do_lower_case,
      seq_length=settings.max_seq_length, data_metadata=info, serving=settings.export_serving)


EXPORTER = exporting.Exporter("", export_pretraining)
