"""Checkpoints: one reader for every format, loading weights into a model, and the front door
of the checkpoint modules.

The weights of every format are read to, and written from, {original TF1 name: array}:

  checkpoint_names.py        the name table (ORIGINAL_NAMES), the original's variable shapes, a
                             model's weights got and set under the original names (LoadReport)
  checkpoint_tf1.py          original TF1 checkpoints read and written
  checkpoint_model_garden.py Model Garden encoders read
  checkpoint_hf.py           Hugging Face safetensors read and written, config.json read
  checkpoint_training.py     our training checkpoints (layers tracked by name) restored and read
  checkpoints.py (this)      which format a path is, the config beside it, read_weights and
                             load_weights for all of them, and which head a model has

Callers import this module (every name of the modules above is re-exported here), so the
split is invisible outside the model tier. Writing a model in another format, with its head and
the files beside it, is conversion.py's.
"""

import json
from typing import Dict, Optional, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import head_specs
# Re-exported: the names every caller of the checkpoint modules uses come from here.
# pylint: disable=unused-import
from bert_tf.model.checkpoint_hf import (
    HF_WEIGHTS_FILE, bert_config_from_hf, hf_to_original, load_hf_safetensors, original_to_hf,
    read_hf_safetensors, save_hf_safetensors, write_hf_safetensors)
from bert_tf.model.checkpoint_model_garden import (
    load_model_garden_encoder, model_garden_encoder_weights, model_garden_head_variables,
    model_garden_to_original, read_model_garden_checkpoint)
from bert_tf.model.checkpoint_names import (
    ORIGINAL_NAMES, CheckpointMismatchError, LoadReport,
    describe_sizes, float32_copy, get_original_weights, is_weight_name, model_sizes,
    model_variables, original_name, original_variable_shapes, set_original_weights)
from bert_tf.model.checkpoint_tf1 import (
    TF_CHECKPOINT_PARTS, checkpoint_reader, read_tf1_checkpoint, save_tf1_checkpoint,
    write_tf1_checkpoint)
from bert_tf.model.checkpoint_training import (
    DROPOUT_SEEDS, build_model_like_checkpoint, checkpointable, config_from_model,
    dropout_seed_states, is_training_checkpoint, read_training_checkpoint,
    restore_training_checkpoint, training_checkpoint_layers)
# The head kinds, the task_info.json and Hugging Face tokenizer files every reader of a model
# folder shares (conversion imports them from here too).
from bert_tf.model.provenance import (
    HF_ARCHITECTURES, HF_SPECIAL_TOKENS_FILE, HF_TOKENIZER_CONFIG_FILE, OUTPUT_WEIGHTS_HEADS,
    HF_VOCAB_FILE, PRETRAINING, TASK_INFO_FILE, hf_task_info, read_hf_casing, recorded_task_info)
from bert_tf.model.provenance import head_of as head_of_task_info
# pylint: enable=unused-import

# === Fine-tuned heads ===
# The heads a checkpoint can hold beside the encoder, each with the Hugging Face class holding it,
# are provenance.HEAD_KINDS (the one table); a fine-tuned head's weights are named by its
# registration (head_specs.HeadSpec.weights). The heads of provenance.OUTPUT_WEIGHTS_HEADS have
# the same names (the original's output_weights / output_bias, and one Hugging Face name):
# which one they are is read from what is recorded beside them (Hugging Face's config.json
# `architectures`, our task_info.json:
# provenance.recorded_task_info), never guessed from the weights. Every format holds every
# head: tf1 and hf by name (hf with its class in config.json), keras as the task model; the
# labels and the head's kind go to task_info.json beside tf1 and keras outputs (and to
# config.json's id2label for hf).


def model_head(model) -> Optional[str]:
  """The head of a model built here: a registered head's kind (head_specs: each says how it
  recognises its model), PRETRAINING or None (encoder)."""
  registered = head_specs.recognised(model)
  if registered is not None:
    return registered
  names = {layer.name for layer in model.layers}
  if "seq_relationship" in names or "predictions_transform" in names:
    return PRETRAINING
  return None


# === Formats ===
FORMATS = ("tf1", "model_garden", "hf", "keras", "bert_tf")


# === One reader for every format ===
# Training init, export, conversion and every fine-tuning task read weights through
# read_weights / load_weights, so each accepts the same checkpoints.


def resolve_checkpoint(path: str) -> str:
  """A directory -> its latest TF checkpoint (a run's output_dir), else its model.safetensors (a
  Hugging Face model folder); any other path unchanged.

  Raises:
    FileNotFoundError: a directory with neither.
  """
  if io.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is not None:
      return latest
    hf_weights = io.join(path, HF_WEIGHTS_FILE)
    if io.exists(hf_weights):
      return hf_weights
    if io.exists(io.join(path, HF_WEIGHTS_FILE + ".index.json")):
      raise FileNotFoundError(f"{path} holds sharded safetensors ({HF_WEIGHTS_FILE}.index.json), "
                              f"which are not read here; save the model as one {HF_WEIGHTS_FILE}")
    if io.exists(io.join(path, "pytorch_model.bin")):
      raise FileNotFoundError(f"{path} holds PyTorch weights (pytorch_model.bin) only, which are "
                              f"not read here; save the model as {HF_WEIGHTS_FILE}")
    raise FileNotFoundError(f"{path} is a directory without a checkpoint (no TF 'checkpoint' "
                            f"file naming one, no {HF_WEIGHTS_FILE})")
  return path


def config_beside(path: str, source_format: Optional[str] = None) -> BertConfig:
  """The config that belongs to a checkpoint: bert_config.json beside it (tf1, Model Garden,
  ours), config.json beside a safetensors file, or the one inside a .keras model."""
  source_format = source_format or detect_format(path)
  if source_format == "keras":
    return config_from_model(keras.models.load_model(path))
  directory = io.dirname(path)
  if source_format == "hf":
    hf_path = f"{directory}/config.json"
    if not io.exists(hf_path):
      raise FileNotFoundError(f"no config.json beside {path}; pass a bert config")
    return bert_config_from_hf(json.loads(io.read_text(hf_path)), source=hf_path)
  config_path = f"{directory}/bert_config.json"
  if not io.exists(config_path):
    raise FileNotFoundError(f"no bert_config.json beside {path}; pass a bert config")
  return BertConfig.from_json_file(config_path)


def read_weights(path: str, config: Optional[BertConfig] = None,
                 source_format: Optional[str] = None) -> Dict[str, np.ndarray]:
  """Weights under the original TF1 names from any checkpoint the project reads.

  Args:
    path: one of our training checkpoints (file prefix, or the run directory for its latest),
      an original TF1 checkpoint (including the outputs of the original's fine-tuning scripts,
      whose heads come back under their original names), a Model Garden checkpoint, Hugging Face
      safetensors or a .keras model.
    config: the model's config; needed only for our training checkpoints (read from
      bert_config.json beside them when None).
    source_format: one of FORMATS; detected when None.

  Returns:
    original name -> array, without optimizer slots and step counters.
  """
  path = resolve_checkpoint(path)
  source_format = source_format or detect_format(path)
  if source_format == "bert_tf":
    values = read_training_checkpoint(path, config or config_beside(path, "bert_tf"))
  elif source_format == "tf1":
    values = read_tf1_checkpoint(path)
  elif source_format == "model_garden":
    values = read_model_garden_checkpoint(path)
  elif source_format == "hf":
    values = read_hf_safetensors(path)
  elif source_format == "keras":
    values = get_original_weights(keras.models.load_model(path))
  else:
    raise ValueError(f"{path}: format {source_format!r} is not one of {', '.join(FORMATS)}")
  return {name: value for name, value in values.items() if is_weight_name(name)}


def load_weights(model, path: str, strict: bool = False,
                 source_format: Optional[str] = None) -> LoadReport:
  """Loads weights (only: no optimizer state, no step) from any readable checkpoint into model.

  Our training checkpoints are restored by layer name, so they load into a pruned or a full
  graph alike; every other format goes through the original names (set_original_weights).
  A head of provenance.OUTPUT_WEIGHTS_HEADS never loads into a model of another such head
  (their weights have the same names): when what
  is recorded beside the checkpoint (recorded_task_info) names the other kind, the head is left
  out (reported missing, with a warning) and the rest is loaded.

  Args:
    model: any model built here (encoder, pretraining or task model).
    path: see read_weights.
    strict: raise CheckpointMismatchError when a model variable is missing or a shape differs.
    source_format: one of FORMATS; detected when None.

  Returns:
    A LoadReport; `loaded` names the original names that were assigned.
  """
  path = resolve_checkpoint(path)
  source_format = source_format or detect_format(path)
  head = model_head(model)
  other_head = None
  if head in OUTPUT_WEIGHTS_HEADS:
    recorded = head_of_task_info(recorded_task_info(path)[0])
    if recorded not in (None, head):
      other_head = recorded
      logging.warning("%s holds a %s head, which is not loaded into this %s model (only the "
                      "encoder is)", path, recorded, head)
  if source_format == "bert_tf" and other_head is None:
    saved = training_checkpoint_layers(path)
    if all(layer.name in saved for layer in model.layers if layer.weights):
      restore_training_checkpoint(model, path, saved)
      report = LoadReport(loaded=list(model_variables(model)))
      logging.info("Loaded %s into %s: %s", path, model.name, report.summary())
      return report
  if source_format == "bert_tf":
    # Another task's checkpoint (e.g. pretraining into a task model): by the original names.
    values = read_training_checkpoint(path, config_from_model(model))
    optional: Tuple[str, ...] = ("cls/", "output_")
  elif source_format == "tf1":
    values, optional = read_weights(path, source_format="tf1"), ()
  else:
    # Model Garden encoders and Hugging Face BertModel files have no pretraining heads.
    values, optional = read_weights(path, source_format=source_format), ("cls/",)
  if other_head is not None:
    shared = head_specs.spec_of(other_head).weights.original
    values = {name: value for name, value in values.items() if name not in shared}
  report = set_original_weights(model, values, strict=strict, source=path, optional=optional)
  if source_format == "tf1":
    names = checkpoint_reader(path).get_variable_to_shape_map()
    report.skipped = sorted(name for name in names if not is_weight_name(name))
  return report


def detect_format(path: str) -> str:
  """Guesses the format of a weights file or checkpoint from its name and contents."""
  if path.endswith(".safetensors"):
    return "hf"
  if path.endswith(".keras"):
    return "keras"
  names = checkpoint_reader(path).get_variable_to_shape_map()
  if "bert/embeddings/word_embeddings" in names:
    return "tf1"
  if is_training_checkpoint(path):
    return "bert_tf"
  if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
    return "model_garden"
  raise ValueError(f"cannot tell the format of {path}; name it explicitly ({', '.join(FORMATS)})")


def load_tf1_checkpoint(model, path: str, strict: bool = True) -> LoadReport:
  """Loads an original (TF1-name) BERT checkpoint into our encoder or pretraining model.

  Released checkpoints and run_pretraining training checkpoints both work; optimizer slots and
  global_step are skipped (and listed in the report). See set_original_weights for `strict`.
  """
  return load_weights(model, path, strict=strict, source_format="tf1")
