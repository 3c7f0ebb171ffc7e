"""The entry points of an export of pretrained weights: a trained pretraining model's
(export_trained_model: plain SavedModels with serving signatures, and the TF Serving models) and
the `export` command's (export_serving_models: the TF Serving models of weights read from a
checkpoint, in the layout serving/tf_serving.py describes).

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
<step> and all from one float32 copy of the trained model: pretrained.pretraining_exports builds
them all, tf_serving.save_exports writes them.
"""

import contextlib
import os
from typing import Any, Dict, Mapping, Optional

from absl import logging
import keras
import numpy as np

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.model import provenance
from bert_tf.serving import modules
from bert_tf.serving import pretrained
from bert_tf.serving import tf_serving
from bert_tf.config import BertConfig


# The plain SavedModels' folders under the export base directory, and every model a
# pretraining export writes there (the TF Serving ones named after SERVING_NAME, as by
# export_serving_models).
ENCODER, PRETRAINING = modules.PLAIN_ENCODER, modules.PLAIN_PRETRAINING
SERVING_NAME = "bert"
SERVING_NAMES = (SERVING_NAME, f"{SERVING_NAME}_encoder", f"{SERVING_NAME}_preprocessor")
MODEL_NAMES = (ENCODER, PRETRAINING) + SERVING_NAMES


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
  return export_trained_model(model, config, base_dir, vocab_file=vocab_file,
                              data_metadata=data_metadata, serving=False, version=version)


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
      of the models written.

  Returns:
    The encoder's version directory, base_dir/encoder/<version>.
  """
  tf_serving.check_version(version)
  weights = checkpoints.get_original_weights(model)
  with _serving_settings(vocab_file if serving else None, do_lower_case, seq_length,
                         data_metadata) as settings:
    exports = pretrained.pretraining_exports(config, weights, source=model.name,
                                             vocab_file=vocab_file,
                                             data_metadata=data_metadata, serving=settings)
    paths = tf_serving.save_exports(exports, base_dir, version)
  logging.info("Exported the encoder and the pretraining model to %s/{%s,%s}/%s", base_dir,
               ENCODER, PRETRAINING, os.path.basename(paths[ENCODER]))
  if settings:
    logging.info("Exported the TF Serving models to %s",
                 ", ".join(sorted(paths[name] for name in SERVING_NAMES)))
  return paths[ENCODER]


def export_serving_models(config: BertConfig, weights: Mapping[str, np.ndarray],
                          vocab_file: str, export_dir: str, do_lower_case: bool = True,
                          seq_length: int = tf_serving.DEFAULT_SEQ_LENGTH,
                          top_k: int = tf_serving.DEFAULT_TOP_K,
                          version: Optional[int] = None, model_name: str = "bert",
                          data_metadata: Optional[Mapping[str, Any]] = None,
                          warmup: bool = True,
                          length_buckets: Optional[str] = length_buckets_lib.AUTO
                          ) -> Dict[str, str]:
  """Writes the encoder, preprocessor and text SavedModels in TF Serving's layout
  (serving/tf_serving.py describes them): the `export` command's export.

  Size: twelve parameters, the `export` command's flags one each.

  Args:
    config: the model's config.
    weights: name -> array under the original TF1 names (checkpoints.get_original_weights, or
      read_weights); with cls/ names the text model also gets fill_mask and next_sentence.
    vocab_file: the WordPiece vocab the model was trained with.
    export_dir: the model base directory; models go to <export_dir>/<name>/<version>/.
    do_lower_case: the tokenizer's flag (must match training).
    seq_length: the packed length of the serving_default / fill_mask / next_sentence signatures.
    top_k: tokens returned per [MASK] by fill_mask.
    version: the version number; default: one more than the largest already there.
    model_name: the text model's name; the others are <model_name>_encoder and
      <model_name>_preprocessor.
    data_metadata: the training data's metadata, written as assets/data_metadata.json.
    warmup: write assets.extra/tf_serving_warmup_requests.
    length_buckets: --length_buckets: the raw-text signatures pad a request to its longest text
      rounded up to one of these lengths ("auto", "none": always seq_length, or a list).

  Returns:
    {"preprocessor": path, "encoder": path, "text": path} of the version directories written.
  """
  tf_serving.check_version(version)
  with tf_serving.staged_vocab(vocab_file) as local_vocab:
    settings = modules.ServingSettings(local_vocab, do_lower_case, seq_length, top_k, model_name,
                                       length_buckets, warmup)
    exports = pretrained.pretraining_exports(config, weights, saved_models=False,
                                             data_metadata=data_metadata, serving=settings)
    paths = tf_serving.save_exports(exports, export_dir, version)
  return {export.kind: paths[export.name] for export in exports}


@contextlib.contextmanager
def _serving_settings(vocab_file: Optional[str], do_lower_case: Optional[bool],
                      seq_length: int, data_metadata: Optional[Mapping[str, Any]]):
  """The TF Serving models' settings (modules.ServingSettings) while their vocab is staged, or
  None without a vocab_file; do_lower_case None takes the data's metadata (default True)."""
  if not vocab_file:
    yield None
    return
  if do_lower_case is None:
    do_lower_case = bool((data_metadata or {}).get("do_lower_case", True))
  with tf_serving.staged_vocab(vocab_file) as local_vocab:
    yield modules.ServingSettings(local_vocab, bool(do_lower_case), seq_length,
                                  tf_serving.DEFAULT_TOP_K, SERVING_NAME,
                                  length_buckets_lib.AUTO, warmup=True)


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
  # Without --vocab_file, the vocab the run recorded from the data's metadata (its vocab.txt).
  vocab_file = settings.vocab_file
  recorded = io.join(settings.output_dir, provenance.VOCAB_FILE)
  if not vocab_file and io.exists(recorded):
    vocab_file = recorded
  if settings.export_serving and not vocab_file:
    logging.warning("No --vocab_file, and the data's metadata names no vocab that is still "
                    "there: the export holds the ids-in models only (encoder, pretraining), "
                    "not the raw-text ones for TF Serving (bert, bert_encoder, "
                    "bert_preprocessor); give --vocab_file for those")
  return export_trained_model(
      model, config, base_dir,
      vocab_file=vocab_file, do_lower_case=settings.do_lower_case,
      seq_length=settings.max_seq_length, data_metadata=info, serving=settings.export_serving,
      version=version)


# The encoder (ids in) is written by every pretraining export: its version folder is the one
# the run checks and returns; the others are its siblings of the same version.
EXPORTER = exporting.Exporter(ENCODER, export_pretraining)
