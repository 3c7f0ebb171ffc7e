"""Exports a trained pretraining model as plain SavedModels with serving signatures.

Every export of a training run goes to <output_dir>/export/<model name>/<step>/
(model.exporting: TF Serving's layout, the one convention of every command). Written by
export_saved_models(model, config, base_dir, version=v):
  base_dir/encoder/<v>/      SavedModel of the encoder; signature "serving_default" takes int32
                             input_word_ids, input_mask, input_type_ids [B, S] and returns
                             sequence_output [B, S, H] and pooled_output [B, H].
  base_dir/pretraining/<v>/  SavedModel of the pretraining model; signature "serving_default"
                             takes int32 input_word_ids, input_mask, input_type_ids [B, S] and
                             masked_lm_positions [B, P] and returns masked_lm_logits [B, P, V]
                             and next_sentence_logits [B, 2].
Each version holds assets/bert_config.json, assets/vocab.txt (when given) and
assets/data_metadata.json (when given), as the TF Serving versions do.
The exported models compute in float32 whatever precision training used.

`EXPORTER` (exporting.Exporter of `export_pretraining`) is what run_pretraining hands to
training: at <output_dir>/export/, these plain SavedModels and, with a vocab, the TF Serving
models of serving/tf_serving.py (bert, bert_encoder, bert_preprocessor), every one at version
<step> and all from one float32 copy of the trained model (modules.float32_models).
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


# The plain SavedModels' folders under the export base directory, and every model a
# pretraining export writes there (the TF Serving ones with serving/tf_serving.py's names).
ENCODER, PRETRAINING = "encoder", "pretraining"
MODEL_NAMES = (ENCODER, PRETRAINING, "bert", "bert_encoder", "bert_preprocessor")


def _save(model, names, outputs, path, assets, call=None):
  """Saves `model` as a SavedModel whose serving signature takes int32 [B, None] `names`, with
  `assets` ({file name: text}) in its assets/ folder.

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
  # A version appears under its number only when complete, assets included.
  with io.atomic_path(path) as tmp:
    tf.saved_model.save(module, tmp, signatures={"serving_default": serve})
    io.makedirs(io.join(tmp, "assets"))
    for name, text in assets.items():
      io.write_text(io.join(tmp, "assets", name), text)


def export_saved_models(model: keras.Model, config: BertConfig, base_dir: str,
                        vocab_file: Optional[str] = None,
                        data_metadata: Optional[Mapping[str, Any]] = None,
                        version: Optional[int] = None) -> str:
  """Writes the encoder and pretraining SavedModels with config, vocab and data metadata.

  Args:
    model: a trained pretraining model (build_pretraining_model), any dtype policy, possibly
      created under a distribution strategy.
    config: its BertConfig (written as assets/bert_config.json).
    base_dir: the model base directory: writes base_dir/encoder/<version>/ and
      base_dir/pretraining/<version>/ (a version there already is replaced); any tf.io.gfile
      path.
    vocab_file: copied to each version's assets/vocab.txt when given.
    data_metadata: the training data's metadata, written as assets/data_metadata.json.
    version: the version; default one more than the largest of either model.

  Returns:
    The encoder's version directory.
  """
  encoder, pretraining = modules.float32_models(
      config, checkpoints.get_original_weights(model), source=model.name)
  return _write_saved_models(encoder, pretraining, config, base_dir, vocab_file, data_metadata,
                             version)


def _write_saved_models(encoder: keras.Model, pretraining: keras.Model, config: BertConfig,
                        base_dir: str, vocab_file: Optional[str],
                        data_metadata: Optional[Mapping[str, Any]],
                        version: Optional[int]) -> str:
  """export_saved_models of the float32 models (modules.float32_models) already built."""
  if version is None:
    version = max(tf_serving.next_version(io.join(base_dir, name))
                  for name in (ENCODER, PRETRAINING))
  assets = {"bert_config.json": config.to_json_string()}
  if vocab_file:
    assets["vocab.txt"] = io.read_text(vocab_file)
  if data_metadata is not None:
    assets["data_metadata.json"] = json.dumps(dict(data_metadata), indent=2) + "\n"
  # call_encoder: a sequence length of 0 gives empty outputs, as in the serving exports.
  encoder_dir = io.join(base_dir, ENCODER, str(version))
  _save(encoder, ENCODER_INPUTS, ("sequence_output", "pooled_output"), encoder_dir, assets,
        call=modules.call_encoder)
  _save(pretraining, PRETRAINING_INPUTS, ("masked_lm_logits", "next_sentence_logits"),
        io.join(base_dir, PRETRAINING, str(version)), assets)
  return encoder_dir


def export_trained_model(model: keras.Model, config: BertConfig, base_dir: str,
                         vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                         seq_length: int = 128, data_metadata: Optional[Mapping[str, Any]] = None,
                         serving: bool = True, version: Optional[int] = None) -> str:
  """The exports at the end of pretraining: plain SavedModels, and TF Serving models, of one
  float32 copy of the model, all at one version.

  Args:
    model: the trained pretraining model.
    config: its config.
    base_dir: the model base directory: the plain SavedModels go to base_dir/encoder/<version>/
      and base_dir/pretraining/<version>/, and when `serving` and a vocab_file are given the TF
      Serving models to base_dir/bert/<version>/, bert_encoder/ and bert_preprocessor/.
    vocab_file: the training vocab (copied into the exports; needed for TF Serving models).
    do_lower_case: the tokenizer's casing; None takes the data's metadata (default True).
    seq_length: the TF Serving models' packed length.
    data_metadata: the training data's metadata, copied into the exports.
    serving: also write the TF Serving models (raw text in).
    version: the version (run_pretraining: the global step); default one more than the largest
      of the plain SavedModels.

  Returns:
    The encoder's version directory, base_dir/encoder/<version>.
  """
  weights = checkpoints.get_original_weights(model)
  models = modules.float32_models(config, weights, source=model.name)
  encoder_dir = _write_saved_models(*models, config, base_dir, vocab_file, data_metadata, version)
  version = int(os.path.basename(encoder_dir))
  logging.info("Exported the encoder and the pretraining model to %s/{%s,%s}/%d", base_dir,
               ENCODER, PRETRAINING, version)
  if serving and vocab_file:
    if do_lower_case is None:
      do_lower_case = bool((data_metadata or {}).get("do_lower_case", True))
    paths = tf_serving.export_serving_models(
        config, weights, vocab_file, base_dir, do_lower_case=do_lower_case,
        seq_length=seq_length, data_metadata=data_metadata, models=models, version=version)
    logging.info("Exported the TF Serving models to %s", ", ".join(sorted(paths.values())))
  return encoder_dir


def export_pretraining(model: keras.Model, config: BertConfig, settings,
                       info: Optional[Mapping[str, Any]] = None,
                       version: Optional[int] = None) -> str:
  """run_pretraining's export (exporting.Exporter's `export`): export_trained_model to
  <output_dir>/export/ at `version` with the run's vocab_file, do_lower_case, max_seq_length
  and export_serving settings; `info` is the training data's metadata. Returns
  <output_dir>/export/encoder/<version>."""
  base_dir = io.join(settings.output_dir, exporting.EXPORT_DIR)
  # A resumed run that lost the checkpoint of this step trained it again (training/pretraining.py
  # warns): this export replaces every model of the earlier attempt at that step.
  for name in MODEL_NAMES:
    io.remove_if_exists(io.join(base_dir, name, str(version)))
  return export_trained_model(
      model, config, base_dir,
      vocab_file=settings.vocab_file, do_lower_case=settings.do_lower_case,
      seq_length=settings.max_seq_length, data_metadata=info, serving=settings.export_serving,
      version=version)


# The encoder (ids in) is written by every pretraining export: its version folder is the one
# the run checks and returns; the others are its siblings of the same version.
EXPORTER = exporting.Exporter(ENCODER, export_pretraining)
