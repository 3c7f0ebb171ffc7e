"""Original (TF1-name) checkpoints: every weight of one read (no optimizer slots), and one
written that TF1 code reads, under the exact original names.

Original checkpoints written by run_pretraining also hold optimizer slots (`<name>/adam_m`,
`<name>/adam_v`) and `global_step`; reading skips them (checkpoint_names.is_weight_name).

Part of the checkpoint readers and writers whose front door is model/checkpoints.py.
"""

from typing import Dict, Mapping

import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.model.checkpoint_names import get_original_weights, is_weight_name


def checkpoint_reader(path: str):
  """tf.train.load_checkpoint(path), or FileNotFoundError naming the path."""
  try:
    return tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, ValueError) as e:
    raise FileNotFoundError(f"no TF checkpoint at {path}: {e}") from None


def read_tf1_checkpoint(path: str) -> Dict[str, np.ndarray]:
  """All model weights (no optimizer slots) of a TF1-name checkpoint, e.g. bert_model.ckpt.

  Args:
    path: the checkpoint prefix (".../bert_model.ckpt") or a directory with a `checkpoint` file.
  """
  reader = checkpoint_reader(path)
  # Optimizer slots are never read: they would triple the memory of a large model.
  return {name: reader.get_tensor(name)
          for name in sorted(reader.get_variable_to_shape_map()) if is_weight_name(name)}


TF_CHECKPOINT_PARTS = (".data-00000-of-00001", ".index")  # data first: the index says complete


def write_tf1_checkpoint(values: Mapping[str, np.ndarray], path: str) -> str:
  """Writes arrays under their exact names as a TF checkpoint that TF1 code can read.

  Args:
    values: name -> array.
    path: the checkpoint prefix to write (files `path.index`, `path.data-00000-of-00001`).

  Returns:
    The prefix written.
  """
  names = sorted(values)
  # Data first, index last: a reader that sees the index finds the data beside it.
  with io.atomic_path(path, parts=TF_CHECKPOINT_PARTS) as tmp:
    # SaveV2 writes the names exactly as given, unlike tf.train.Checkpoint's object-graph keys.
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(values[n]) for n in names])
  return path


def save_tf1_checkpoint(model, path: str) -> str:
  """Writes our model's weights under the original names and layouts (see write_tf1_checkpoint)."""
  return write_tf1_checkpoint(get_original_weights(model), path)
